"""CSV records as the quote scan sees them: records end at newlines outside quotes; read one by one
if need be."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from datapipe.builder.source.base import DEFAULT_ENCODING


@dataclass(frozen=True)
class CsvDialect:
    """The separator, quote character and encoding of CSV reader options, their defaults filled
    in."""

    sep: str
    quotechar: str
    encoding: str


def csv_dialect(options: Mapping[str, Any]) -> CsvDialect:
    """The dialect of CSV reader ``options``: pandas' ``sep`` (or ``delimiter``), ``quotechar``,
    ``encoding``."""
    return CsvDialect(
        options.get("sep") or options.get("delimiter") or ",",
        options.get("quotechar") or '"',
        options.get("encoding") or DEFAULT_ENCODING,
    )


def logical_records(text: str, quotechar: str) -> Iterator[tuple[str, bool, int]]:
    """(record text, quotes closed, 0-based line it starts on) per logical record: physical lines
    joined while a quote is open.

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
            yield lines[i], False, i
            i += 1
        else:
            yield record, True, i
            i = j + 1


def parse_record(raw: str, delimiter: str, quotechar: str) -> list[str]:
    """The fields of one record, where a carriage return that ends no line (a bare CR) is text of
    its field.

    Records end at a newline (LF or CRLF), so a bare CR inside a record is content, as it is
    inside quotes: Python's csv module refuses it outside quotes, and pandas would end the
    record there, cutting one row into two that shift the columns (and the types inferred).
    """
    body = raw.rstrip("\r")  # the CRs of a CRLF line end
    if "\r" not in body:
        return next(csv.reader([raw], delimiter=delimiter, quotechar=quotechar))
    mark = next(chr(c) for c in range(0xE000, 0xF900) if chr(c) not in body)
    fields = next(csv.reader([body.replace("\r", mark)], delimiter=delimiter, quotechar=quotechar))
    return [f.replace(mark, "\r") for f in fields]


def has_bare_cr(data: bytes, quote: int | None) -> bool:
    """Whether ``data`` holds a carriage return outside quotes that is not part of a CRLF."""
    if b"\r" not in data:
        return False
    raw = np.frombuffer(data, dtype=np.uint8)
    bare = raw == 13
    bare[:-1] &= raw[1:] != 10
    if quote is not None and bytes([quote]) in data:
        bare &= (np.cumsum(raw == quote, dtype=np.uint8) & 1) == 0
    return bool(bare.any())


@dataclass(frozen=True)
class Records:
    """The non-blank records of a CSV block as the record model sees them."""

    fields: np.ndarray  # the number of fields of each
    lines: np.ndarray  # the 0-based line each starts on: the newlines before it in the block


def record_fields(data: bytes, sep: int, quote: int | None) -> np.ndarray | None:
    """The number of fields of each non-blank record of ``data`` (``scan_records``), or None."""
    records = scan_records(data, sep, quote)
    return None if records is None else records.fields


def scan_records(data: bytes, sep: int, quote: int | None) -> Records | None:
    """The fields and first line of each non-blank record of ``data``, where records end at
    newlines outside quotes and fields at separators outside quotes (the record model of the slow
    path and of the quote scan that cut the file), computed with numpy. None when a carriage return
    outside quotes is not part of a CRLF (pandas ends a record there, the slow path does not), or
    when a quote is still open at the end."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if not len(raw):
        return Records(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    # bytes absent from the block (the common case for carriage returns and quotes) are found absent
    # by a memchr over the bytes, without an array of the block's size
    newline, delims = raw == 10, raw == sep
    every_newline = np.flatnonzero(newline)  # quoted ones too: they start lines, not records
    bare_cr = None
    if b"\r" in data:
        bare_cr = raw == 13
        bare_cr[:-1] &= ~newline[1:]
    if quote is not None and bytes([quote]) in data:
        quotes = raw == quote
        # a uint8 sum wraps at 256, an even number, so the parity survives
        outside = (np.cumsum(quotes, dtype=np.uint8) & 1) == 0
        # a quote still open at the end: pandas may read it as a plain character
        if not outside[-1]:
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
        if bare_cr is not None:
            bare_cr &= outside
    if bare_cr is not None and bare_cr.any():
        return None
    starts = np.concatenate([[0], np.flatnonzero(newline) + 1])
    starts = starts[starts < len(raw)]
    # separators per record from their positions: a pass over the few separators, not over every
    # byte
    seps = np.flatnonzero(delims)
    fields = (
        np.searchsorted(seps, np.append(starts[1:], len(raw))) - np.searchsorted(seps, starts) + 1
    )
    nonblank = ~_BLANK[raw[starts]]
    # a record that starts with a blank byte is blank only if all its bytes are
    if not nonblank.all():
        nonblank = np.logical_or.reduceat(~_BLANK[raw], starts)
    starts = starts[nonblank]
    return Records(fields[nonblank], np.searchsorted(every_newline, starts))


_BLANK = np.zeros(256, dtype=bool)  # bytes pandas treats as a blank line's
_BLANK[list(b" \t\r\n")] = True


def fields_agree(
    frame: pd.DataFrame, fields: np.ndarray | None, width: int | None, has_header: bool
) -> bool:
    """Whether pandas read the records the slow path would: one row per record, each with ``width``
    fields (pandas pads a short row with missing values, where the slow path quarantines it)."""
    if fields is None:
        return False
    if has_header:
        width, fields = (int(fields[0]), fields[1:]) if len(fields) else (width, fields)
    return len(frame) == len(fields) and bool((fields == width).all())


def read_records(
    data: bytes, options: dict[str, Any], has_header: bool = True, width: int | None = None
) -> tuple[pd.DataFrame, list[tuple[int, str, str]], np.ndarray]:
    """Record by record: bad records become rejects (with their text), the rest is parsed by pandas;
    and the 0-based line of ``data`` each row starts on (by row id: the rows read are its length).

    Records end at newlines outside quotes, as the quote scan that cut the file assumed. Without a
    header row, ``width`` (the fields of the file's first record, or of ``names``) is the number
    of fields every record must have.
    """
    dialect = csv_dialect(options)
    encoding, delimiter, quotechar = dialect.encoding, dialect.sep, dialect.quotechar
    text = data.decode(encoding, "surrogateescape")
    csv.field_size_limit(2**31 - 1)
    good, rows, rejects, lines = io.StringIO(), [], [], []
    # every field quoted: pandas reads a field of spaces or a \r back as it was (NA values stay NA)
    quoting = csv.QUOTE_MINIMAL if options.get("quoting") == csv.QUOTE_NONE else csv.QUOTE_ALL
    writer = csv.writer(
        good, delimiter=delimiter, quotechar=quotechar, lineterminator="\r\n", quoting=quoting
    )
    row = -1
    for raw, closed, line in logical_records(text, quotechar):
        if not raw.strip():
            continue  # a blank line, as pandas skips it
        shown = raw.encode(encoding, "surrogateescape").decode(encoding, "replace")
        # not strict: text after a closing quote joins the field ("x"y is xy), as pandas reads it
        try:
            record = parse_record(raw, delimiter, quotechar) if closed else None
        except csv.Error as e:
            record, why = None, f"malformed CSV ({e})"
        else:
            why = "a quote that is never closed"
        if width is None and record is not None and has_header:
            width = len(record)
            writer.writerow(record)
            continue
        row += 1
        lines.append(line)
        # no header row, and the file's first record not known
        if width is None and record is not None:
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
    starts = np.array(lines, dtype=np.int64)
    if not good.getvalue():  # no header and no good row
        return pd.DataFrame(index=pd.Index([], dtype="int64")), rejects, starts
    frame = pd.read_csv(io.StringIO(good.getvalue()), **{**options, "encoding": None})
    frame.index = pd.Index(rows[: len(frame)], dtype="int64")
    return frame, rejects, starts


def no_header_width(options: Mapping[str, Any], first: bytes, data: bytes) -> int | None:
    """Without a header row: the fields every record must have (of ``names``, or of the file's first
    record that parses, read as the record-by-record path reads it); ``first`` is the file's first
    record where ``data`` is a later block."""
    names = options.get("names")
    if names is not None:
        return len(names)
    dialect = csv_dialect(options)
    leading = first or data
    encoding, delimiter, quotechar = dialect.encoding, dialect.sep, dialect.quotechar
    size = 1 << 16
    while True:
        complete = size >= len(leading)
        text = leading[:size].decode(encoding, "surrogateescape")
        if not complete:
            text = text[: text.rfind("\n") + 1]
        for raw, closed, _ in logical_records(text, quotechar):
            if not raw.strip():
                continue
            if not closed and not complete:
                break  # the quote may close further on: read more
            if closed:
                return len(parse_record(raw, delimiter, quotechar))
        else:
            if complete:
                return None
        size *= 4
