"""The quarantine: every rejected row, with the stage and reason, kept as rejected.parquet.

Columns: stage ('source', 'stages[3].validate', 'sample'), reason, source (the input file as
named in the lineage), row (1-based record number in that file, the header not counted), line
(1-based line of that file the record starts on, for CSV and JSON lines; null where unknown),
data (the row as JSON when it was rejected, or the raw text of a line that could not be parsed).
Quarantines written before the line column have none (versioning/rejected.py reads both).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pandas as pd

from datapipe.builder.encode import jsonable

T = TypeVar("T")
COLUMNS = ("stage", "reason", "source", "row", "line", "data")
ROWS_AT_ONCE = 8192  # rows a quarantine row group holds at most ...
BYTES_AT_ONCE = 16 << 20  # ... and characters of data (a near_dedupe stage's rows are documents)
_NUMBERS = ("row", "line")


@dataclass(frozen=True)
class Reject:
    """One rejected row of a partition; ``row`` is its id within the partition and ``line`` the
    0-based line of the partition's bytes it starts on (text sources; None where unknown), until
    placed in its file. ``data`` is None on the client until the quarantine is written
    (``reject_data``)."""

    stage: str
    reason: str
    row: int
    data: str | None
    line: int | None = None


# a reject placed in its file: (reject, source label, 1-based row, 1-based line or None)
Placed = tuple[Reject, str, int, int | None]


def row_json(frame: pd.DataFrame, row: Any) -> str:
    """The row ``row`` of ``frame`` as a JSON object (bytes as base64, missing as null, an
    infinity as the text "inf" or "-inf": a rejected row is kept whatever it holds)."""
    values = frame.loc[row]
    return json.dumps(
        {str(k): _finite(jsonable(v)) for k, v in values.items()},
        ensure_ascii=False,
        allow_nan=False,
    )


def _finite(value: Any) -> Any:
    """``value`` with infinite floats as their text, which JSON can hold."""
    if isinstance(value, float) and math.isinf(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def rejects_of(frame: pd.DataFrame, stage: str, reasons: dict[Any, str]) -> list[Reject]:
    """Rejects for the rows of ``frame`` named in ``reasons`` (row id -> reason)."""
    return [
        Reject(stage, reason, int(row), row_json(frame, row)) for row, reason in reasons.items()
    ]


def quarantine_bytes(records: Iterable[Placed]) -> bytes:
    """rejected.parquet from (reject, source label, row in that file, line or None), in the given
    order."""
    buf = io.BytesIO()
    write_quarantine(buf, records)
    return buf.getvalue()


def write_quarantine(file: Any, records: Iterable[Placed]) -> None:
    """rejected.parquet into ``file`` (open for writing) from (reject, source label, row in that
    file, line or None), in the given order; ROWS_AT_ONCE rows at a time (a near_dedupe stage's
    rejects hold the text of every document it removed: never all of it at once)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(c, pa.int64() if c in _NUMBERS else pa.string()) for c in COLUMNS])
    with pq.ParquetWriter(file, schema) as out:
        for batch in _batches(records, lambda record: len(record[0].data or "")):
            rows = ((r.stage, r.reason, s, row, line, r.data) for r, s, row, line in batch)
            columns = list(zip(*rows, strict=True))
            arrays = [_array(pa, c, f.type) for c, f in zip(columns, schema, strict=True)]
            out.write_table(pa.Table.from_arrays(arrays, schema=schema))


def write_data(file: Any, data: Sequence[str]) -> None:
    """Rejects' data alone, a ``data`` column, into ``file`` (open for writing): what a task
    leaves for the quarantine (``reject_data``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("data", pa.string())])
    with pq.ParquetWriter(file, schema) as out:
        for batch in _batches(data, len):
            column = _array(pa, batch, pa.string())
            out.write_table(pa.Table.from_arrays([column], schema=schema))


def _batches(items: Iterable[T], size: Callable[[T], int]) -> Iterator[list[T]]:
    """``items`` in lists of at most ROWS_AT_ONCE items and about BYTES_AT_ONCE of ``size``."""
    batch: list[T] = []
    total = 0
    for item in items:
        batch.append(item)
        total += size(item)
        if len(batch) >= ROWS_AT_ONCE or total >= BYTES_AT_ONCE:
            yield batch
            batch, total = [], 0
    if batch:
        yield batch


def _array(pa: Any, values: Sequence[Any], kind: Any) -> Any:
    """``values`` as an Arrow array; a text with a lone surrogate (as a map stage may make), which
    UTF-8 cannot hold, with it as its escape."""
    try:
        return pa.array(values, kind)
    except UnicodeEncodeError:
        return pa.array([_escaped(v) if isinstance(v, str) else v for v in values], kind)


def _escaped(text: str) -> str:
    """``text`` with each character UTF-8 cannot hold as its backslash escape: in a JSON string,
    the escape of the same character."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
