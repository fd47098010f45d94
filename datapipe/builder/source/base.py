"""What every source format shares: the listed files, the partitions, the source a worker reads, the
interface.

Partitions follow source order (files sorted by path, then byte blocks or row groups in file
order), so the concatenation of all partitions is the same rows in the same order whatever
the blocksize. That is what lets the sample order and the shard bytes ignore partitioning.

Every frame a reader returns is indexed by the row's position in its partition (0, 1, ...; raw
rows, rejects included), which stays the row's identity through the stages and, plus the
partition's offset, gives its row number in the source file for the quarantine.
"""

from __future__ import annotations

import json
import zlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np
import pandas as pd

from datapipe.builder.source.options import DEFAULT_BLOCKSIZE, DEFAULT_FILES_PER_PARTITION
from datapipe.builder.source.schema import SAMPLE_BYTES, SchemaSample, apply_schema
from datapipe.errors import ConfigError, NotFoundError

DEFAULT_ENCODING = "utf-8"  # of text sources without options.encoding


class SourceSpec(Protocol):
    """What a source is read from: the pipeline file's ``source`` (``config.SourceConfig``) has
    these."""

    path: str
    format: str
    options: dict[str, Any]
    # class_folders: the pinned class names (a list, or a ClassesFile naming a file of them), or
    # None
    classes: Any


@dataclass(frozen=True)
class InputFile:
    """One raw input file: its filesystem path, the name it has in messages and lineage, its size
    and etag."""

    path: str
    label: str
    size: int
    etag: str | None = None
    # a local file's stat when listed (builder/known_hashes.py): device, inode, size, times
    stamp: str | None = None


@dataclass(frozen=True)
class Part:
    """One partition: a byte block of a text file, a Parquet row group, or a group of files."""

    number: int
    file: int  # index into Source.files (the first file, for a group)
    start: int = 0
    length: int | None = None  # None: to the end of the file
    row_group: int | None = None
    members: tuple[int, ...] = ()  # the files of a 'files' partition
    # start and length are record boundaries (CSV with quoting): read them as they are
    exact: bool = False


@dataclass(frozen=True)
class Source:
    """Everything a worker needs to read any partition of the source."""

    format: str
    fs: Any
    files: tuple[InputFile, ...]
    parts: tuple[Part, ...] = ()  # none until it is partitioned
    options: dict[str, Any] = field(default_factory=dict)  # passed to the reader
    schema: dict[str, str] = field(default_factory=dict)  # text formats: column -> SCHEMA_TYPES
    has_header: bool = True  # CSV: the first record of each file names the columns
    quote: int | None = None  # CSV: the quote byte, when a quoted field may hold a newline
    # CSV files whose block boundaries still have to be found (align_parts)
    unaligned: tuple[int, ...] = ()
    # CSV: options that only a whole file can apply, so one partition per file
    whole_files: bool = False
    row_groups: tuple[int, ...] = ()  # Parquet: the row groups of each file
    blocksize: int = DEFAULT_BLOCKSIZE  # the configured partition size (an execution setting)
    files_per_partition: int = DEFAULT_FILES_PER_PARTITION
    # text formats: what the inferred types were inferred from (``datapipe schema`` shows it)
    sample: SchemaSample | None = None


@dataclass
class RawPart:
    """A parsed partition: good rows, and (row id, reason, raw text) of the rows that failed to
    parse. Text sources also say where each row starts: ``lines[row id]``, the newlines before it
    in the partition's bytes; and ``newlines``, those in all of them (None where unknown)."""

    frame: pd.DataFrame
    rows_in: int
    rejects: list[tuple[int, str, str]] = field(default_factory=list)
    lines: np.ndarray | None = None
    newlines: int | None = None


class SourceFormat(ABC):
    """One source format: the options its reader takes, what is learnt of the files once, how they
    are partitioned (a pure function of that) and how a partition is read."""

    name: ClassVar[str]
    # how messages list the reader options, where not one by one
    options_help: ClassVar[str | None] = None

    @abstractmethod
    def reader_options(self) -> tuple[str, ...]:
        """The source.options keys the reader takes (besides the partitioning ones)."""

    @abstractmethod
    def check_options(self, options: Mapping[str, Any]) -> tuple[str, str] | None:
        """(key, problem) of a reader option whose value this format cannot take, or None."""

    def section_options(
        self, spec: SourceSpec, base_dir: str, fs: Any, options: dict[str, Any]
    ) -> dict[str, Any]:
        """The reader options: ``options`` (source.options less the execution ones), plus what a
        format takes from elsewhere in the source section (class_folders: its directory and
        classes). None by default."""
        return options

    @abstractmethod
    def describe(
        self,
        fs: Any,
        files: tuple[InputFile, ...],
        options: dict[str, Any],
        dtypes: Mapping[str, str],
    ) -> Source:
        """The source unpartitioned, with what reading it needs that the listing does not say (the
        schema, with ``dtypes`` over the inferred types; the CSV layout; Parquet row groups), read
        from the files once."""

    @abstractmethod
    def partition(self, source: Source, blocksize: int) -> Source:
        """``source`` cut into partitions of about ``blocksize`` bytes: no I/O, the same cuts for
        the same input."""

    @abstractmethod
    def read(self, source: Source, part: Part) -> RawPart:
        """Parse partition ``part`` of ``source``; rows that cannot be parsed are kept as
        rejects."""

    def parsed_bytes(self, source: Source, part: Part) -> bytes | None:
        """Everything ``read`` parses partition ``part`` from, when that alone decides its rows
        wherever the part lies (a text block): an incremental build then knows an unchanged block
        of a changed file. None (the default): the file's hash and the place in it decide."""
        return None


def open_input(source: Source, f: InputFile, compression: str | None = "infer") -> Any:
    """``f`` opened for reading, with errors that name it."""
    try:
        return source.fs.open(f.path, "rb", compression=compression)
    except FileNotFoundError:
        raise NotFoundError(f"{f.label}: the source file disappeared during the build") from None
    except PermissionError:
        raise ConfigError(f"{f.label}: cannot read the source file (permission denied)") from None


def block_bytes(handle: Any, part: Part) -> bytes:
    """The bytes of text partition ``part`` from its open file. Exact parts were cut between records
    by the quote scan; others at the first anchor line after each nominal cut (``line_cut``)."""
    if part.length is None:
        return handle.read()
    if part.exact:
        handle.seek(part.start)
        return handle.read(part.length)
    window = max(part.length // 2, 1)
    start = line_cut(handle, part.start, window)
    end = line_cut(handle, part.start + part.length, window)
    handle.seek(start)
    return handle.read(end - start)


# a line is an anchor when the CRC of its last ANCHOR_TAIL bytes (with the newline) is 0 mod this
ANCHOR_EVERY = 16
ANCHOR_TAIL = 256
_CHUNK = 1 << 16


def line_cut(handle: Any, offset: int, window: int) -> int:
    """Where a block cut nominally at ``offset`` starts: just after the first anchor line that ends
    at or after ``offset``, else after the first line ending ``window`` bytes past it (or at the
    end of the file). An anchor is chosen by the bytes that end it, so an edit that shifts the bytes
    after it moves no cut past the next anchor: blocks away from the edit keep their bytes, and an
    incremental build its measure of them. A cut never precedes a later offset's (the cuts of
    consecutive blocks are in order)."""
    if offset == 0:
        return 0
    at = max(offset - ANCHOR_TAIL, 0)
    handle.seek(at)
    data, look = b"", offset - at  # where in data the next newline is looked for
    while True:
        chunk = handle.read(_CHUNK)
        data += chunk
        p = data.find(b"\n", look)
        while p >= 0:
            end = at + p + 1
            if end - 1 >= offset + window:
                return end
            if zlib.crc32(data[max(p + 1 - ANCHOR_TAIL, 0) : p + 1]) % ANCHOR_EVERY == 0:
                return end
            p = data.find(b"\n", p + 1)
        if not chunk:
            return at + len(data)
        # keep the tail the next line's anchor test needs
        keep = max(len(data) - ANCHOR_TAIL, 0)
        data, at, look = data[keep:], at + keep, max(look, len(data)) - keep


def read_sample(fs: Any, files: Sequence[InputFile]) -> tuple[str, bytes]:
    """The schema sample: the label of the first non-empty file and its first MiB, cut after its
    last complete line."""
    for f in files:
        if f.size == 0:
            continue
        with fs.open(f.path, "rb", compression="infer") as handle:
            data = handle.read(SAMPLE_BYTES)
        if len(data) == SAMPLE_BYTES and b"\n" in data:
            data = data[: data.rindex(b"\n") + 1]
        return f.label, data
    return "", b""


def typed(source: Source, raw: RawPart, *, strings: bool) -> RawPart:
    """``raw`` with the source's column types applied; a value that does not convert rejects its
    row."""
    frame, bad = apply_schema(raw.frame, source.schema, strings=strings)
    if len(bad):
        for row, reason in bad.items():
            raw.rejects.append(
                (int(row), reason, json.dumps(_row_text(raw.frame, row), ensure_ascii=False))
            )
        frame = frame.drop(index=bad.index)
    raw.frame = frame
    return raw


def _row_text(frame: pd.DataFrame, row: Any) -> dict[str, Any]:
    return {str(k): (None if pd.isna(v) else str(v)) for k, v in frame.loc[row].items()}
