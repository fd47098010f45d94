"""Reads one partition of the source into a pandas frame; rows that cannot be parsed are kept as rejects.

Every frame is indexed by the row's position in its partition (0, 1, ...; raw rows, rejects
included), which stays the row's identity through the stages and, plus the partition's offset,
gives its row number in the source file for the quarantine.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from fsspec.utils import read_block

from datapipe.builder.schema import apply_schema
from datapipe.builder.sources import Part, SourcePlan
from datapipe.errors import ConfigError, NotFoundError


@dataclass
class RawPart:
    """A parsed partition: good rows, and (row id, reason, raw text) of the rows that failed to parse."""

    frame: pd.DataFrame
    rows_in: int
    rejects: list[tuple[int, str, str]] = field(default_factory=list)


def _open(plan: SourcePlan, path: str, label: str, compression: str | None = "infer") -> Any:
    try:
        return plan.fs.open(path, "rb", compression=compression)
    except FileNotFoundError:
        raise NotFoundError(f"{label}: the source file disappeared during the build") from None
    except PermissionError:
        raise ConfigError(f"{label}: cannot read the source file (permission denied)") from None


def _block(plan: SourcePlan, part: Part) -> tuple[bytes, bytes]:
    """(the start of the file up to its first record, for a CSV block after the first, else b''; the block's bytes).

    The first record is a CSV file's header (prepended to the block), or, without a header row,
    what says how many fields a record has. Exact parts were cut between records by the quote
    scan; others at the first newline after their nominal start.
    """
    f = plan.files[part.file]
    first = b""
    with _open(plan, f.path, f.label) as handle:
        if part.length is None:
            data = handle.read()
        elif part.exact:
            handle.seek(part.start)
            data = handle.read(part.length)
        else:
            data = read_block(handle, part.start, part.length, delimiter=b"\n")
        if part.start and plan.format == "csv":
            handle.seek(0)
            first = _leading_record(handle, plan.quote)
    return first, data


def _leading_record(handle: Any, quote: int | None) -> bytes:
    """The file's lines up to the end of its first non-blank record (blank lines before it, as pandas
    skips them; a record ends at a newline outside quotes)."""
    lines, parity, text = [], 0, False
    for line in iter(handle.readline, b""):
        lines.append(line)
        text = text or bool(line.strip())
        if quote is not None:
            parity ^= line.count(quote) & 1
        if text and not parity:
            break
    return b"".join(lines)


def _with_schema(plan: SourcePlan, raw: RawPart, *, strings: bool) -> RawPart:
    frame, bad = apply_schema(raw.frame, plan.schema, strings=strings)
    if len(bad):
        for row, reason in bad.items():
            raw.rejects.append((int(row), reason, json.dumps(_row_text(raw.frame, row), ensure_ascii=False)))
        frame = frame.drop(index=bad.index)
    raw.frame = frame
    return raw


def _row_text(frame: pd.DataFrame, row: Any) -> dict[str, Any]:
    return {str(k): (None if pd.isna(v) else str(v)) for k, v in frame.loc[row].items()}


# CSV ---------------------------------------------------------------------------------------------


def _csv_options(plan: SourcePlan) -> dict[str, Any]:
    return {**plan.options, "dtype": str}


def _csv_fast(data: bytes, options: dict[str, Any]) -> pd.DataFrame:
    frame = pd.read_csv(io.BytesIO(data), **options)
    if not isinstance(frame.index, pd.RangeIndex):  # rows with more fields than columns: pandas made them an index
        raise pd.errors.ParserError("rows with more fields than the header")
    frame.index = pd.RangeIndex(len(frame))
    return frame


def _logical_records(text: str, quotechar: str) -> Iterator[tuple[str, bool]]:
    """(record text, quotes closed) per logical record: physical lines joined while a quote is open.

    A quote still open at the end of the block is reported on its first line alone, and reading
    goes on from the next line, so one stray quote costs one row instead of the rest of the file.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i = 0
    while i < len(lines):
        j, record = i, lines[i]
        while record.count(quotechar) % 2 and j + 1 < len(lines):
            j += 1
            record += "\n" + lines[j]
        if record.count(quotechar) % 2:
            yield lines[i], False
            i += 1
        else:
            yield record, True
            i = j + 1


def record_fields(data: bytes, sep: int, quote: int | None) -> np.ndarray | None:
    """The number of fields of each non-blank record of ``data``, where records end at newlines
    outside quotes and fields at separators outside quotes (the record model of the slow path and
    of the quote scan that cut the file), computed with numpy. None when a carriage return outside
    quotes is not part of a CRLF (pandas ends a record there, the slow path does not), or when a
    quote is still open at the end."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if not len(raw):
        return np.zeros(0, dtype=np.int64)
    newline, delims = raw == 10, raw == sep
    bare_cr = raw == 13
    bare_cr[:-1] &= ~newline[1:]
    if quote is not None:
        quotes = raw == quote
        if quotes.any():  # a uint8 sum wraps at 256, an even number, so the parity survives
            outside = (np.cumsum(quotes, dtype=np.uint8) & 1) == 0
            if not outside[-1]:  # a quote still open at the end: pandas may read it as a plain character
                return None
            # RFC 4180 quoting only: a quote opens at a field's start (or escapes one: "") and closes
            # before a separator, a line end or another quote. A stray quote is read one way by pandas,
            # another by the quote parity: such a block goes record by record.
            bounds = np.zeros(256, dtype=bool)
            bounds[[sep, 10, 13, quote]] = True
            at = np.flatnonzero(quotes)
            opens = ~outside[at]
            before = bounds[raw[np.maximum(at - 1, 0)]] | (at == 0)
            after = bounds[raw[np.minimum(at + 1, len(raw) - 1)]] | (at == len(raw) - 1)
            if (opens & ~before).any() or (~opens & ~after).any():
                return None
            newline &= outside
            delims &= outside
            bare_cr &= outside
    if bare_cr.any():
        return None
    starts = np.concatenate([[0], np.flatnonzero(newline) + 1])
    starts = starts[starts < len(raw)]
    nonblank = np.logical_or.reduceat(~_BLANK[raw], starts)
    return (np.add.reduceat(delims, starts, dtype=np.int64) + 1)[nonblank]


_BLANK = np.zeros(256, dtype=bool)  # bytes pandas treats as a blank line's
_BLANK[list(b" \t\r\n")] = True


def _agrees(frame: pd.DataFrame, fields: np.ndarray | None, width: int | None, has_header: bool) -> bool:
    """Whether pandas read the records the slow path would: one row per record, each with ``width``
    fields (pandas pads a short row with missing values, where the slow path quarantines it)."""
    if fields is None:
        return False
    if has_header:
        width, fields = (int(fields[0]), fields[1:]) if len(fields) else (width, fields)
    return len(frame) == len(fields) and bool((fields == width).all())


def _csv_slow(data: bytes, options: dict[str, Any], has_header: bool = True,
              width: int | None = None) -> tuple[pd.DataFrame, list[tuple[int, str, str]], int]:
    """Record by record: bad records become rejects (with their text), the rest is parsed by pandas.

    Records end at newlines outside quotes, as the quote scan that cut the file assumed. Without a
    header row, ``width`` (the fields of the file's first record, or of ``names``) is the number
    of fields every record must have.
    """
    encoding = options.get("encoding") or "utf-8"
    delimiter = options.get("sep") or options.get("delimiter") or ","
    quotechar = options.get("quotechar") or '"'
    text = data.decode(encoding, "surrogateescape")
    csv.field_size_limit(2**31 - 1)
    good, rows, rejects = io.StringIO(), [], []
    # every field quoted: pandas reads a field of spaces or a \r back as it was (NA values stay NA)
    quoting = csv.QUOTE_MINIMAL if options.get("quoting") == csv.QUOTE_NONE else csv.QUOTE_ALL
    writer = csv.writer(good, delimiter=delimiter, quotechar=quotechar, lineterminator="\r\n", quoting=quoting)
    row = -1
    for raw, closed in _logical_records(text, quotechar):
        if not raw.strip():
            continue  # a blank line, as pandas skips it
        shown = raw.encode(encoding, "surrogateescape").decode(encoding, "replace")
        try:  # not strict: text after a closing quote joins the field ("x"y is xy), as pandas reads it
            record = next(csv.reader([raw], delimiter=delimiter, quotechar=quotechar)) if closed else None
        except csv.Error as e:
            record, why = None, f"malformed CSV ({e})"
        else:
            why = "a quote that is never closed"
        if width is None and record is not None and has_header:
            width = len(record)
            writer.writerow(record)
            continue
        row += 1
        if width is None and record is not None:  # no header row, and the file's first record not known
            width = len(record)
        if record is None:
            rejects.append((row, why, shown))
        elif any("\udc80" <= ch <= "\udcff" for ch in raw):
            rejects.append((row, f"invalid {encoding} bytes", shown))
        elif len(record) != width:
            rejects.append((row, f"expected {width} fields, saw {len(record)}", shown))
        else:
            writer.writerow(record)
            rows.append(row)
    if not good.getvalue():  # no header and no good row
        return pd.DataFrame(index=pd.Index([], dtype="int64")), rejects, row + 1
    frame = pd.read_csv(io.StringIO(good.getvalue()), **{**options, "encoding": None})
    frame.index = pd.Index(rows[: len(frame)], dtype="int64")
    return frame, rejects, row + 1


def _no_header_width(plan: SourcePlan, first: bytes, data: bytes) -> int | None:
    """Without a header row: the fields every record must have (of ``names``, or of the file's first
    record that parses, read as the record-by-record path reads it)."""
    names = plan.options.get("names")
    if names is not None:
        return len(names)
    source = first or data
    encoding = plan.options.get("encoding") or "utf-8"
    delimiter = plan.options.get("sep") or plan.options.get("delimiter") or ","
    quotechar = plan.options.get("quotechar") or '"'
    size = 1 << 16
    while True:
        complete = size >= len(source)
        text = source[:size].decode(encoding, "surrogateescape")
        if not complete:
            text = text[: text.rfind("\n") + 1]
        for raw, closed in _logical_records(text, quotechar):
            if not raw.strip():
                continue
            if not closed and not complete:
                break  # the quote may close further on: read more
            if closed:
                return len(next(csv.reader([raw], delimiter=delimiter, quotechar=quotechar)))
        else:
            if complete:
                return None
        size *= 4


def read_csv_part(plan: SourcePlan, part: Part) -> RawPart:
    """A CSV block: pandas' C parser when the block is clean, record by record when it is not.

    Clean means that pandas read one row per record with the file's number of fields, records
    and fields found as the quote scan found them (``record_fields``); where a stray quote or a
    short row makes them differ, the block is read record by record, so that the rows and the
    quarantine never depend on where the blocks were cut.
    """
    first, data = _block(plan, part)
    text = first + data if plan.has_header else data
    if not text.strip():
        return RawPart(pd.DataFrame(), 0)
    options = _csv_options(plan)
    sep = options.get("sep") or options.get("delimiter") or ","
    checked = part.length is not None and len(sep.encode()) == 1  # a file read whole is never cut
    width = _no_header_width(plan, first, data) if checked and not plan.has_header else None
    try:
        try:
            frame = _csv_fast(text, options)
        except pd.errors.EmptyDataError:
            if not checked:
                return RawPart(pd.DataFrame(), 0)
            raise pd.errors.ParserError("pandas found no records") from None
        if checked and not _agrees(frame, record_fields(text, sep.encode()[0], plan.quote), width, plan.has_header):
            raise pd.errors.ParserError("the records are not all whole")
        raw = RawPart(frame, len(frame))
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError):
        frame, rejects, rows_in = _csv_slow(text, options, plan.has_header, width)
        raw = RawPart(frame, rows_in, rejects)
    return _with_schema(plan, raw, strings=True)


# JSON lines --------------------------------------------------------------------------------------


def read_jsonl_part(plan: SourcePlan, part: Part) -> RawPart:
    """One JSON object per line (in ``options.encoding``, default UTF-8); a line that is not one is a reject."""
    _, data = _block(plan, part)
    encoding = plan.options.get("encoding") or "utf-8"
    records, rows, rejects = [], [], []
    row = -1
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        row += 1
        try:
            record = json.loads(line.decode(encoding))
        except UnicodeDecodeError:
            rejects.append((row, f"invalid {encoding}", line.decode(encoding, "replace")))
            continue
        except ValueError as e:
            rejects.append((row, f"not valid JSON ({e})", line.decode(encoding, "replace")))
            continue
        if not isinstance(record, dict):
            rejects.append((row, f"expected a JSON object, got {type(record).__name__}", line.decode(encoding)))
            continue
        records.append(record)
        rows.append(row)
    frame = pd.DataFrame.from_records(records, index=pd.Index(rows, dtype="int64")) if records else pd.DataFrame()
    known = [c for c in plan.schema if c in frame.columns]
    frame = frame[known + sorted(c for c in frame.columns if c not in plan.schema)]
    return _with_schema(plan, RawPart(frame, row + 1, rejects), strings=False)


# Parquet and files -------------------------------------------------------------------------------


def _nullable(arrow_type: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_integer(arrow_type):
        return pd.Int64Dtype()
    if pa.types.is_boolean(arrow_type):
        return pd.BooleanDtype()
    return None


def read_parquet_part(plan: SourcePlan, part: Part) -> RawPart:
    """One row group, with integer and bool columns kept nullable (not turned into floats)."""
    import pyarrow.parquet as pq

    f = plan.files[part.file]
    with _open(plan, f.path, f.label, compression=None) as handle:
        try:
            table = pq.ParquetFile(handle).read_row_group(part.row_group, **plan.options)
        except Exception as e:  # pyarrow's error kinds vary by damage
            raise ConfigError(f"{f.label}: row group {part.row_group} cannot be read ({e})") from None
    frame = table.to_pandas(types_mapper=_nullable)
    frame.index = pd.RangeIndex(len(frame))
    return RawPart(frame, len(frame))


def read_files_part(plan: SourcePlan, part: Part) -> RawPart:
    """Columns path, name, parent and bytes, one row per file."""
    rows = []
    for i in part.members:
        f = plan.files[i]
        with _open(plan, f.path, f.label, compression=None) as handle:
            content = handle.read()
        parent, _, name = f.label.rpartition("/")
        rows.append({"path": f.label, "name": name, "parent": parent.rpartition("/")[2], "bytes": content})
    return RawPart(pd.DataFrame(rows, columns=["path", "name", "parent", "bytes"]), len(rows))


READERS = {"csv": read_csv_part, "jsonl": read_jsonl_part, "parquet": read_parquet_part, "files": read_files_part}


def read_part(plan: SourcePlan, part: Part) -> RawPart:
    """Parse partition ``part`` of ``plan``."""
    return READERS[plan.format](plan, part)
