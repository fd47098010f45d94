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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from datapipe.builder.encode import jsonable

COLUMNS = ("stage", "reason", "source", "row", "line", "data")
_NUMBERS = ("row", "line")


@dataclass(frozen=True)
class Reject:
    """One rejected row of a partition; ``row`` is its id within the partition and ``line`` the
    0-based line of the partition's bytes it starts on (text sources; None where unknown), until
    placed in its file."""

    stage: str
    reason: str
    row: int
    data: str
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
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [(r.stage, r.reason, source, row, line, r.data) for r, source, row, line in records]
    table = pa.table(
        {
            name: pa.array(
                [r[i] for r in rows], type=pa.int64() if name in _NUMBERS else pa.string()
            )
            for i, name in enumerate(COLUMNS)
        }
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()
