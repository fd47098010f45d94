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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from datapipe.build.config import EXECUTION_OPTIONS, SourceConfig, parse_size
from datapipe.build.schema import SAMPLE_BYTES, SCHEMA_TYPES, infer_schema
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


@dataclass(frozen=True)
class SourcePlan:
    """Everything a worker needs to read any partition of the source."""

    format: str
    fs: Any
    files: tuple[InputFile, ...]
    parts: tuple[Part, ...]
    options: dict[str, Any] = field(default_factory=dict)  # passed to the reader
    schema: dict[str, str] = field(default_factory=dict)  # text formats: column -> SCHEMA_TYPES


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


def _text_parts(fs: Any, files: list[InputFile], blocksize: int) -> list[Part]:
    parts = []
    for i, f in enumerate(files):
        if f.path.endswith(COMPRESSED) or f.size == 0:
            parts.append(Part(len(parts), i))
            continue
        for start in range(0, f.size, blocksize):
            parts.append(Part(len(parts), i, start, blocksize))
    return parts


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
            record = json.loads(line)
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
                execution: Mapping[str, Any] | None = None) -> SourcePlan:
    """List the files, cut them into partitions and fix the column types.

    ``execution`` holds the partitioning options (blocksize, files_per_partition); they shape
    the work, never the result.
    """
    options = {k: v for k, v in source.options.items() if k not in EXECUTION_OPTIONS}
    execution = {**{k: v for k, v in source.options.items() if k in EXECUTION_OPTIONS}, **(execution or {})}
    storage_options = {**execution.pop("storage_options", {}), **(storage_options or {})}
    fs, files = list_files(source, base_dir, storage_options)
    dtypes = options.pop("dtype", None) or {}
    if not isinstance(dtypes, dict) or any(t not in SCHEMA_TYPES for t in dtypes.values()):
        raise ConfigError(f"source.options.dtype: expected a mapping of column -> one of {', '.join(SCHEMA_TYPES)}")
    schema: dict[str, str] = {}
    if source.format in ("csv", "jsonl"):
        blocksize = parse_size(execution.get("blocksize", DEFAULT_BLOCKSIZE))
        parts = _text_parts(fs, files, blocksize)
        schema = {**_sample_schema(source.format, _read_sample(fs, files), options), **dtypes}
    elif source.format == "parquet":
        parts = _parquet_parts(fs, files)
    else:
        per = int(execution.get("files_per_partition", DEFAULT_FILES_PER_PARTITION))
        parts = _file_groups(files, max(per, 1), parse_size(execution.get("blocksize", DEFAULT_BLOCKSIZE)))
    return SourcePlan(source.format, fs, tuple(files), tuple(parts), options, schema)
