"""CSV sources: pandas' C parser where a block is clean, record by record where not; blocks cut
between records."""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pandas as pd

from datapipe.builder.source.base import (
    InputFile,
    Part,
    RawPart,
    Source,
    SourceFormat,
    block_bytes,
    open_input,
    read_sample,
    typed,
)
from datapipe.builder.source.csv_records import (
    Records,
    csv_dialect,
    fields_agree,
    has_bare_cr,
    no_header_width,
    read_records,
    record_fields,
    scan_records,
)
from datapipe.builder.source.partition import byte_blocks
from datapipe.builder.source.schema import SchemaSample, infer_schema
from datapipe.errors import ConfigError

# What the reader takes of pandas.read_csv's own keywords
_CSV_NOT_TAKEN = (
    "filepath_or_buffer",
    "chunksize",
    "iterator",
    "index_col",
    "compression",
    "memory_map",
)


# pandas options that give a row a meaning by its place in the file: a block cut from the middle
# of the file cannot apply them, so such files are read whole (one partition per file).
_WHOLE_FILE_OPTIONS = ("skiprows", "skipfooter", "nrows", "comment", "escapechar", "lineterminator")
_ASCII_COMPATIBLE = (
    "utf-8",
    "utf8",
    "ascii",
    "latin-1",
    "latin1",
    "iso-8859-1",
    "cp1252",
    "windows-1252",
)


def csv_layout(options: Mapping[str, Any]) -> tuple[bool, bool, int | None]:
    """(whole files?, header row?, quote byte or None) for CSV reader ``options``.

    The quote byte is None when quoting is off (``quoting: 3``); otherwise block boundaries are
    placed only at newlines outside quotes (``align_parts``), so a quoted field holding a newline
    is never cut in two.
    """
    header = options.get("header", "infer")
    if header == "infer":
        has_header = "names" not in options  # pandas: explicit names mean no header row
    elif header is None:
        has_header = False
    elif header == 0:
        has_header = True
    else:
        # a header row further down: only a whole file knows which line it is
        return True, True, None
    dialect = csv_dialect(options)
    encoding = str(dialect.encoding).lower().replace("_", "-")
    whole = (
        any(options.get(k) not in (None, 0, "\n") for k in _WHOLE_FILE_OPTIONS)
        or options.get("skip_blank_lines") is False
        or options.get("doublequote") is False
        or encoding not in _ASCII_COMPATIBLE
    )
    quotechar = dialect.quotechar
    if options.get("quoting") == csv.QUOTE_NONE or len(str(quotechar).encode()) != 1:
        return whole or options.get("quoting") != csv.QUOTE_NONE, has_header, None
    return whole, has_header, str(quotechar).encode()[0]


def _block(source: Source, part: Part) -> tuple[bytes, bytes]:
    """(the start of the file up to its first record, for a block after the first, else b''; the
    block's bytes).

    The first record is the file's header (prepended to the block), or, without a header row,
    what says how many fields a record has.
    """
    f = source.files[part.file]
    first = b""
    with open_input(source, f) as handle:
        data = block_bytes(handle, part)
        if part.start:
            handle.seek(0)
            first = _leading_record(handle, source.quote)
    return first, data


def _leading_record(handle: Any, quote: int | None) -> bytes:
    """The file's lines up to the end of its first non-blank record (blank lines before it, as
    pandas skips them; a record ends at a newline outside quotes)."""
    lines, parity, text = [], 0, False
    for line in iter(handle.readline, b""):
        lines.append(line)
        text = text or bool(line.strip())
        if quote is not None:
            parity ^= line.count(quote) & 1
        if text and not parity:
            break
    return b"".join(lines)


def _csv_fast(data: bytes, options: dict[str, Any]) -> pd.DataFrame:
    frame = pd.read_csv(io.BytesIO(data), **options)
    # rows with more fields than columns: pandas made them an index
    if not isinstance(frame.index, pd.RangeIndex):
        raise pd.errors.ParserError("rows with more fields than the header")
    frame.index = pd.RangeIndex(len(frame))
    return frame


def read_csv_part(source: Source, part: Part) -> RawPart:
    """A CSV block: pandas' C parser when the block is clean, record by record when it is not.

    Clean means that pandas read one row per record with the file's number of fields, records
    and fields found as the quote scan found them (``scan_records``); where a stray quote or a
    short row makes them differ, the block is read record by record, so that the rows and the
    quarantine never depend on where the blocks were cut.
    """
    first, data = _block(source, part)
    text = first + data if source.has_header else data
    newlines = data.count(b"\n")
    if not text.strip():
        return RawPart(pd.DataFrame(), 0, newlines=newlines)
    options = {**source.options, "dtype": str}
    sep = csv_dialect(options).sep
    checked = part.length is not None and len(sep.encode()) == 1  # a file read whole is never cut
    width = (
        no_header_width(source.options, first, data) if checked and not source.has_header else None
    )
    shift = first.count(b"\n") if source.has_header else 0  # the header's lines, put before data
    try:
        try:
            frame = _csv_fast(text, options)
        except pd.errors.EmptyDataError:
            if not checked:
                return RawPart(pd.DataFrame(), 0, newlines=newlines)
            raise pd.errors.ParserError("pandas found no records") from None
        records = scan_records(text, sep.encode()[0], source.quote)
        fields = None if records is None else records.fields
        if checked and not fields_agree(frame, fields, width, source.has_header):
            raise pd.errors.ParserError("the records are not all whole")
        if not checked and _cr_is_text(options) and has_bare_cr(text, source.quote):
            raise pd.errors.ParserError("pandas ends a record at a bare CR")
        raw = RawPart(frame, len(frame), lines=_row_lines(records, len(frame), source, shift))
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError):
        frame, rejects, lines = read_records(text, options, source.has_header, width)
        raw = RawPart(frame, len(lines), rejects, lines - shift)
    raw.newlines = newlines
    return typed(source, raw, strings=True)


def _row_lines(records: Records | None, rows: int, source: Source, shift: int) -> Any:
    """The line of the block each of pandas' ``rows`` starts on, where the record model found as
    many records (options such as ``comment`` or ``skiprows`` make pandas skip some: unknown)."""
    if records is None:
        return None
    lines = records.lines[1:] if source.has_header and len(records.lines) else records.lines
    return lines - shift if len(lines) == rows else None


def _cr_is_text(options: Mapping[str, Any]) -> bool:
    """Whether a bare CR is text of its field: records end at LF or CRLF, unless the options name
    another line terminator (pandas then reads the file whole, by its own rule)."""
    return options.get("lineterminator") in (None, "\n")


def _sample_frame(sample: bytes, options: dict[str, Any], quote: int | None) -> tuple[Any, int]:
    """The sample's rows as the build reads them, and the records set aside (malformed: they do not
    vote on a type).

    pandas' C parser reads a clean sample; one whose records it would cut otherwise than the build
    (a bare CR, a stray quote, a short row) is read record by record, so that no broken row, its
    fields shifted into the next columns, turns a column of booleans or numbers into text.
    """
    has_header, sep = csv_layout(options)[1], csv_dialect(options).sep
    checked = len(sep.encode()) == 1 and _cr_is_text(options)
    try:
        frame = pd.read_csv(io.BytesIO(sample), **options)
        if checked and not fields_agree(
            frame,
            record_fields(sample, sep.encode()[0], quote),
            no_header_width(options, b"", sample) if not has_header else None,
            has_header,
        ):
            raise pd.errors.ParserError("the records are not all whole")
        return frame, 0
    except (pd.errors.ParserError, UnicodeDecodeError):
        width = None if has_header else no_header_width(options, b"", sample)
        frame, rejects, _ = read_records(sample, options, has_header, width)
        return frame, len(rejects)


def _check_line_ends(label: str, sample: bytes, options: Mapping[str, Any]) -> None:
    """A ConfigError for a file whose lines end with a bare CR (classic Mac OS): read as LF lines,
    it would be one record."""
    if _cr_is_text(options) and b"\r" in sample and b"\n" not in sample:
        raise ConfigError(
            f"{label}: its lines end with a bare carriage return (CR, as classic Mac OS wrote "
            'them), not a newline; set source.options.lineterminator: "\\r" to read them so, '
            "or convert the file to LF line ends"
        )


def _sample_schema(
    sample: bytes, options: dict[str, Any], quote: int | None
) -> tuple[dict[str, str], int, int]:
    """(the types inferred from ``sample``, the rows they were inferred from, the records set
    aside)."""
    if not sample:
        return {}, 0, 0
    try:
        frame, set_aside = _sample_frame(sample, options, quote)
    except pd.errors.EmptyDataError:
        return {}, 0, 0
    except (ValueError, TypeError) as e:
        raise ConfigError(f"source.options: the CSV reader refused them ({e})") from None
    return infer_schema(frame), len(frame), set_aside


class CsvFormat(SourceFormat):
    """CSV read by pandas.read_csv, whose keywords are the reader options."""

    name = "csv"
    options_help = (
        "the keywords of pandas.read_csv (sep, encoding, quotechar, header, names, na_values, ...)"
    )

    def reader_options(self) -> tuple[str, ...]:
        """pandas.read_csv's keywords, but those the reader sets itself."""
        return _read_csv_keywords()

    def check_options(self, options: Mapping[str, Any]) -> tuple[str, str] | None:
        """pandas checks the values when it first reads (the schema sample)."""
        return None

    def describe(
        self,
        fs: Any,
        files: tuple[InputFile, ...],
        options: dict[str, Any],
        dtypes: Mapping[str, str],
    ) -> Source:
        """The layout the options give (``csv_layout``) and the schema of the first MiB."""
        whole, has_header, quote = csv_layout(options)
        label, data = read_sample(fs, files)
        _check_line_ends(label, data, options)
        inferred, rows, set_aside = _sample_schema(data, options, quote)
        sample = SchemaSample(label, len(data), rows, set_aside) if data else None
        return Source(
            self.name,
            fs,
            files,
            (),
            options,
            {**inferred, **dtypes},
            has_header,
            quote,
            whole_files=whole,
            sample=sample,
        )

    def partition(self, source: Source, blocksize: int) -> Source:
        """Byte blocks, whose cuts the quote scan still has to move between records where quotes may
        hold newlines (``source.unaligned``)."""
        parts = byte_blocks(source.files, blocksize, source.whole_files)
        unaligned = (
            tuple(sorted({p.file for p in parts if p.start > 0}))
            if source.quote is not None
            else ()
        )
        return replace(source, parts=tuple(parts), unaligned=unaligned)

    def read(self, source: Source, part: Part) -> RawPart:
        """``read_csv_part``."""
        return read_csv_part(source, part)

    def parsed_bytes(self, source: Source, part: Part) -> bytes | None:
        """A block's bytes after the file's leading record (``_block``), each with its length; None
        for a file read whole, whose hash says as much."""
        if part.length is None:
            return None
        first, data = _block(source, part)
        return len(first).to_bytes(8, "little") + first + data


@functools.cache
def _read_csv_keywords() -> tuple[str, ...]:
    import inspect

    return tuple(k for k in inspect.signature(pd.read_csv).parameters if k not in _CSV_NOT_TAKEN)
