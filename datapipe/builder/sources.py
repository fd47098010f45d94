"""The source of a build: which files, cut into which partitions, with which column types.

Partitions follow source order (files sorted by path, then byte blocks or row groups in file
order), so the concatenation of all partitions is the same rows in the same order whatever
the blocksize. That is what lets the sample order and the shard bytes ignore partitioning.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from datapipe.builder.config import EXECUTION_OPTIONS, SourceConfig, parse_size
from datapipe.builder.schema import SAMPLE_BYTES, SCHEMA_TYPES, infer_schema
from datapipe.errors import ConfigError, NotFoundError
from datapipe.storage.fs import filesystem, is_local

DEFAULT_BLOCKSIZE = 64 << 20
DEFAULT_FILES_PER_PARTITION = 256
COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".zip")
_GLOB = set("*?[")


@dataclass(frozen=True)
class InputFile:
    """One raw input file: its filesystem path, the name it has in messages and lineage, its size and etag."""

    path: str
    label: str
    size: int
    etag: str | None = None


@dataclass(frozen=True)
class Part:
    """One partition: a byte block of a text file, a Parquet row group, or a group of files."""

    number: int
    file: int  # index into SourcePlan.files (the first file, for a group)
    start: int = 0
    length: int | None = None  # None: to the end of the file
    row_group: int | None = None
    members: tuple[int, ...] = ()  # the files of a 'files' partition
    exact: bool = False  # start and length are record boundaries (CSV with quoting): read them as they are


@dataclass(frozen=True)
class SourcePlan:
    """Everything a worker needs to read any partition of the source."""

    format: str
    fs: Any
    files: tuple[InputFile, ...]
    parts: tuple[Part, ...]
    options: dict[str, Any] = field(default_factory=dict)  # passed to the reader
    schema: dict[str, str] = field(default_factory=dict)  # text formats: column -> SCHEMA_TYPES
    has_header: bool = True  # CSV: the first record of each file names the columns
    quote: int | None = None  # CSV: the quote byte, when a quoted field may hold a newline
    unaligned: tuple[int, ...] = ()  # CSV files whose block boundaries still have to be found (align_parts)


def source_url(source: SourceConfig, base_dir: str) -> str:
    """The source path as a URL: relative local paths are taken from the pipeline file's directory."""
    if "://" in source.path or os.path.isabs(source.path):
        return source.path
    return os.path.join(base_dir, source.path)


def _label(path: str, url: str, fs: Any, base_dir: str) -> str:
    if is_local(fs):
        rel = os.path.relpath(path, base_dir)
        return rel if not rel.startswith("..") else path
    protocol = fs.protocol[0] if isinstance(fs.protocol, tuple | list) else fs.protocol
    return f"{protocol}://{path}"


def list_files(source: SourceConfig, base_dir: str, storage_options: Mapping[str, Any]) -> tuple[Any, list[InputFile]]:
    """The source's files in sorted order, with sizes; a clear error when nothing matches."""
    url = source_url(source, base_dir)
    fs, path = filesystem(url, dict(storage_options))
    if _GLOB & set(path):
        paths = fs.glob(path)
    elif fs.isdir(path):
        paths = fs.find(path)
    elif fs.exists(path):
        paths = [path]
    else:
        raise NotFoundError(f"source.path: {source.path!r} does not exist (looked for {url})")
    infos = []
    for p in sorted(paths):
        info = fs.info(p)
        if info.get("type") == "directory":
            continue
        etag = None if is_local(fs) else str(info.get("ETag") or info.get("etag") or info.get("checksum") or "")
        infos.append(InputFile(p, _label(p, url, fs, base_dir), int(info.get("size") or 0), etag or None))
    if not infos:
        raise NotFoundError(f"source.path: {source.path!r} matches no files (looked for {url})")
    return fs, infos


def _text_parts(fs: Any, files: list[InputFile], blocksize: int, whole: bool = False) -> list[Part]:
    parts = []
    for i, f in enumerate(files):
        if whole or f.path.endswith(COMPRESSED) or f.size == 0:
            parts.append(Part(len(parts), i))
            continue
        for start in range(0, f.size, blocksize):
            parts.append(Part(len(parts), i, start, blocksize))
    return parts


# pandas options that give a row a meaning by its place in the file: a block cut from the middle
# of the file cannot apply them, so such files are read whole (one partition per file).
_WHOLE_FILE_OPTIONS = ("skiprows", "skipfooter", "nrows", "comment", "escapechar", "lineterminator")
_ASCII_COMPATIBLE = ("utf-8", "utf8", "ascii", "latin-1", "latin1", "iso-8859-1", "cp1252", "windows-1252")


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
        return True, True, None  # a header row further down: only a whole file knows which line it is
    encoding = str(options.get("encoding") or "utf-8").lower().replace("_", "-")
    whole = (any(options.get(k) not in (None, 0, "\n") for k in _WHOLE_FILE_OPTIONS)
             or options.get("skip_blank_lines") is False or options.get("doublequote") is False
             or encoding not in _ASCII_COMPATIBLE)
    quotechar = options.get("quotechar") or '"'
    if options.get("quoting") == csv.QUOTE_NONE or len(str(quotechar).encode()) != 1:
        return whole or options.get("quoting") != csv.QUOTE_NONE, has_header, None
    return whole, has_header, str(quotechar).encode()[0]


@dataclass(frozen=True)
class BlockScan:
    """Where a nominal block's quote parity flips: what ``align_parts`` needs to cut a file between records."""

    parity: int  # number of quote bytes in the block, mod 2
    first_even: int  # absolute offset of the first newline after an even number of the block's quotes, or -1
    first_odd: int  # the same after an odd number, or -1


SCAN_CHUNK = 8 << 20


def scan_block(fs: Any, path: str, start: int, length: int, quote: int) -> BlockScan:
    """Quote parity and first newline of each parity in bytes [start, start + length) of ``path`` (a worker task)."""
    parity, first = 0, [-1, -1]
    with fs.open(path, "rb") as handle:
        handle.seek(start)
        pos, left = start, length
        while left > 0:
            chunk = handle.read(min(SCAN_CHUNK, left))
            if not chunk:
                break
            data = np.frombuffer(chunk, dtype=np.uint8)
            # quote parity after each byte (a uint8 sum wraps at 256, an even number, so parity survives)
            after = (np.cumsum(data == quote, dtype=np.uint8) & 1) ^ parity
            newlines = np.flatnonzero(data == 10)
            for p in (0, 1):
                if first[p] < 0:
                    hits = newlines[after[newlines] == p]
                    if len(hits):
                        first[p] = pos + int(hits[0])
            parity = int(after[-1])
            pos, left = pos + len(chunk), left - len(chunk)
    return BlockScan(parity, first[0], first[1])


def scans_needed(plan: SourcePlan) -> list[tuple[int, Part]]:
    """(file, nominal part) of every block whose quotes must be counted before the file can be cut."""
    return [(p.file, p) for p in plan.parts if p.file in plan.unaligned]


def align_parts(plan: SourcePlan, scans: Sequence[BlockScan]) -> SourcePlan:
    """The plan with every quoted CSV file cut only at newlines outside quotes, from ``scans`` of
    ``scans_needed(plan)`` in that order.

    A nominal boundary at byte s moves to just after the first newline at or after s that follows
    an even number of quote bytes since the start of the file (RFC 4180 quoting: a doubled quote
    counts twice). Which blocks were nominal does not matter: the cuts are all record boundaries, so
    the records, and every byte after them, do not depend on the blocksize.
    """
    if not plan.unaligned:
        return plan
    by_file: dict[int, list[tuple[Part, BlockScan]]] = {}
    for (i, part), scan in zip(scans_needed(plan), scans, strict=True):
        by_file.setdefault(i, []).append((part, scan))
    parts: list[Part] = []
    for p in plan.parts:
        if p.file not in by_file:
            parts.append(Part(len(parts), p.file, p.start, p.length, p.row_group, p.members))
        elif p.start == 0:
            parts.extend(_aligned(plan.files[p.file], p.file, by_file[p.file], len(parts)))
    return SourcePlan(plan.format, plan.fs, plan.files, tuple(parts), plan.options, plan.schema, plan.has_header,
                      plan.quote, ())


def _aligned(f: InputFile, index: int, blocks: list[tuple[Part, BlockScan]], first: int) -> list[Part]:
    parities = [0]
    for _, scan in blocks:
        parities.append(parities[-1] ^ scan.parity)

    def record_end(j: int) -> int | None:
        """Just past the first newline outside quotes at or after block j's start."""
        for k in range(j, len(blocks)):
            scan = blocks[k][1]
            hit = scan.first_odd if parities[k] else scan.first_even
            if hit >= 0:
                return hit + 1
        return None

    cuts = sorted({0, *(c for c in (record_end(j) for j in range(1, len(blocks))) if c is not None and c < f.size)})
    ends = [*cuts[1:], f.size]
    return [Part(first + n, index, start, end - start, exact=True)
            for n, (start, end) in enumerate(zip(cuts, ends, strict=True))]


def _parquet_parts(fs: Any, files: list[InputFile]) -> list[Part]:
    import pyarrow.parquet as pq

    parts = []
    for i, f in enumerate(files):
        try:
            with fs.open(f.path, "rb") as handle:
                groups = pq.ParquetFile(handle).metadata.num_row_groups
        except Exception as e:  # pyarrow raises ArrowInvalid and OSError kinds for a bad file
            raise ConfigError(f"{f.label}: not a readable Parquet file ({e})") from None
        parts.extend(Part(len(parts), i, row_group=g) for g in range(groups))
    return parts


def _file_groups(files: list[InputFile], per_partition: int, max_bytes: int) -> list[Part]:
    parts: list[Part] = []
    group: list[int] = []
    size = 0
    for i, f in enumerate(files):
        if group and (len(group) >= per_partition or size + f.size > max_bytes):
            parts.append(Part(len(parts), group[0], members=tuple(group)))
            group, size = [], 0
        group.append(i)
        size += f.size
    if group:
        parts.append(Part(len(parts), group[0], members=tuple(group)))
    return parts


def _read_sample(fs: Any, files: list[InputFile]) -> bytes:
    """The first MiB of the first non-empty file, cut after its last complete line."""
    for f in files:
        if f.size == 0:
            continue
        with fs.open(f.path, "rb", compression="infer") as handle:
            data = handle.read(SAMPLE_BYTES)
        if len(data) == SAMPLE_BYTES and b"\n" in data:
            data = data[: data.rindex(b"\n") + 1]
        return data
    return b""


def _sample_schema(fmt: str, sample: bytes, options: dict[str, Any]) -> dict[str, str]:
    if not sample:
        return {}
    if fmt == "csv":
        try:
            try:
                frame = pd.read_csv(io.BytesIO(sample), on_bad_lines="skip", encoding_errors="replace", **options)
            except pd.errors.ParserError:  # e.g. an unclosed quote: infer from the records that parse
                frame = pd.read_csv(io.StringIO(_well_formed(sample, options)), **options)
        except pd.errors.EmptyDataError:
            return {}
        except (ValueError, TypeError) as e:
            raise ConfigError(f"source.options: the CSV reader refused them ({e})") from None
        return infer_schema(frame)
    records = []
    for line in sample.splitlines():
        try:
            record = json.loads(line.decode(options.get("encoding") or "utf-8"))
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return infer_schema(pd.DataFrame.from_records(records)) if records else {}


def _well_formed(sample: bytes, options: dict[str, Any]) -> str:
    """The header and the records of a CSV sample that have as many fields as the header."""
    delimiter = options.get("sep") or options.get("delimiter") or ","
    text = sample.decode(options.get("encoding") or "utf-8", "replace")
    csv.field_size_limit(2**31 - 1)
    records = []
    try:
        for record in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter):
            if record and (not records or len(record) == len(records[0])):
                records.append(record)
    except csv.Error:
        pass
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="\n").writerows(records)
    return out.getvalue()


def plan_source(source: SourceConfig, base_dir: str, storage_options: Mapping[str, Any] | None = None,
                execution: Mapping[str, Any] | None = None, *, align: bool = True) -> SourcePlan:
    """List the files, cut them into partitions and fix the column types.

    ``execution`` holds the partitioning options (blocksize, files_per_partition); they shape
    the work, never the result. ``align=False`` leaves the quote scan of CSV files that are cut
    into blocks (``scans_needed``, ``align_parts``) to the caller, e.g. to run it on the cluster.
    """
    options = {k: v for k, v in source.options.items() if k not in EXECUTION_OPTIONS}
    execution = {**{k: v for k, v in source.options.items() if k in EXECUTION_OPTIONS}, **(execution or {})}
    storage_options = {**execution.pop("storage_options", {}), **(storage_options or {})}
    fs, files = list_files(source, base_dir, storage_options)
    dtypes = options.pop("dtype", None) or {}
    if not isinstance(dtypes, dict) or any(t not in SCHEMA_TYPES for t in dtypes.values()):
        raise ConfigError(f"source.options.dtype: expected a mapping of column -> one of {', '.join(SCHEMA_TYPES)}")
    schema: dict[str, str] = {}
    whole, has_header, quote = csv_layout(options) if source.format == "csv" else (False, False, None)
    blocksize = execution_size(execution, "blocksize", DEFAULT_BLOCKSIZE)
    if source.format in ("csv", "jsonl"):
        parts = _text_parts(fs, files, blocksize, whole)
        schema = {**_sample_schema(source.format, _read_sample(fs, files), options), **dtypes}
    elif source.format == "parquet":
        parts = _parquet_parts(fs, files)
    else:
        per = execution_count(execution, "files_per_partition", DEFAULT_FILES_PER_PARTITION)
        parts = _file_groups(files, per, blocksize)
    unaligned = tuple(sorted({p.file for p in parts if p.start > 0})) if quote is not None else ()
    plan = SourcePlan(source.format, fs, tuple(files), tuple(parts), options, schema, has_header, quote, unaligned)
    if align:
        plan = align_parts(plan, [scan_block(fs, files[i].path, p.start, p.length or 0, quote or 0)
                                  for i, p in scans_needed(plan)])
    return plan


def execution_size(execution: Mapping[str, Any], key: str, default: int) -> int:
    """A byte size from the partitioning options; ConfigError naming ``source.options.KEY``."""
    try:
        return parse_size(execution.get(key, default))
    except ValueError as e:
        raise ConfigError(f"source.options.{key}: {e} (got {execution.get(key)!r})") from None


def execution_count(execution: Mapping[str, Any], key: str, default: int) -> int:
    """A positive count from the partitioning options; ConfigError naming ``source.options.KEY``."""
    value = execution.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"source.options.{key}: must be a whole number of at least 1 (got {value!r})")
    return value
