"""Shard files by path: write a shard with its index, open or read one, (re)build an index."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from fsspec.implementations.local import LocalFileSystem

from datapipe.errors import NotFoundError, ShardCorruptError
from datapipe.formats.base import ShardReader, WrittenShard
from datapipe.formats.index import ShardIndex
from datapipe.formats.registry import ShardFormat, format_for_path, get_format
from datapipe.storage.fs import open_atomic, put_atomic, read_bytes, sha256_of
from datapipe.storage.local import atomic_write, map_file, release

INDEX_SUFFIX = ".idx"


def index_path(shard: str | os.PathLike[str]) -> Path:
    """Where the index of ``shard`` lives: the shard's path plus '.idx'."""
    return Path(f"{os.fspath(shard)}{INDEX_SUFFIX}")


def _resolve(path: str | os.PathLike[str], fmt: str | ShardFormat | None) -> ShardFormat:
    if isinstance(fmt, ShardFormat):
        return fmt
    return get_format(fmt) if fmt else format_for_path(os.fspath(path))


def write_shard_to(
    fs: Any,
    path: str,
    samples: Iterable[Mapping[str, Any]],
    fmt: str | ShardFormat | None = None,
    *,
    index: bool = True,
) -> tuple[WrittenShard, bytes | None]:
    """Write a shard, its companions and its index (PATH.idx) through any fsspec filesystem, each
    file atomically, the index last.

    ``samples`` may hold blocks of ``EncodedSamples`` (written as they are) among sample dicts.

    Returns what was written and the index bytes (None with ``index=False``).
    """
    shard_format = _resolve(path, fmt)
    with open_atomic(fs, path) as f:
        writer = shard_format.writer(f, name=path)
        writer.write_many(samples)
        written = writer.finish()
    for suffix, data in written.companions.items():
        put_atomic(fs, shard_format.companion_path(path, suffix), data)
    index_bytes = written.index.to_bytes() if index else None
    if index_bytes is not None:
        put_atomic(fs, path + INDEX_SUFFIX, index_bytes)
    return written, index_bytes


def write_shard(
    path: str | os.PathLike[str],
    samples: Iterable[Mapping[str, Any]],
    fmt: str | None = None,
    *,
    index: bool = True,
) -> WrittenShard:
    """Write ``samples`` to a local shard file (and its index), each file atomically."""
    return write_shard_to(LocalFileSystem(), os.fspath(path), samples, fmt, index=index)[0]


def write_index(shard: str | os.PathLike[str], index: ShardIndex) -> Path:
    """Store ``index`` next to ``shard`` atomically; returns the index path."""
    target = index_path(shard)
    with atomic_write(target) as f:
        f.write(index.to_bytes())
    return target


def read_index(
    shard: str | os.PathLike[str], index_file: str | os.PathLike[str] | None = None
) -> ShardIndex | None:
    """The index of ``shard`` (stored next to it, or at ``index_file``), or None when there is
    none."""
    target = index_path(shard) if index_file is None else index_file
    try:
        data = map_file(target)
    except NotFoundError:
        return None
    return ShardIndex.from_bytes(data, os.fspath(target))


def open_shard(
    path: str | os.PathLike[str],
    fmt: str | ShardFormat | None = None,
    *,
    index: bool | Literal["auto"] = "auto",
    copy: bool = False,
    verify_crc: bool = True,
    index_file: str | os.PathLike[str] | None = None,
    name: str | None = None,
    size: int | None = None,
    sha256: str | None = None,
    companion_files: Mapping[str, str | os.PathLike[str]] | None = None,
) -> ShardReader:
    """Open a local shard through mmap. ``index='auto'`` uses ``<shard>.idx`` when it exists,
    True requires it, False ignores it (sequential scan only).

    ``index_file``: the index is stored there instead, and required. ``name`` is what errors call
    the shard (default: ``path``; for a cached copy, its store path). ``size`` and ``sha256``, where
    given, are what a manifest records of the shard: a shard that differs is a ShardCorruptError.
    ``companion_files``: where the format's companions are, by suffix, where not beside the shard
    (copies in a cache keyed by content).
    """
    shard_format = _resolve(path, fmt)
    name = os.fspath(path) if name is None else name
    shard_index = read_index(path, index_file) if index or index_file is not None else None
    if shard_index is None and index_file is not None:
        raise NotFoundError(f"{os.fspath(index_file)}: no such file (the index of {name})")
    if shard_index is None and index is True:
        raise NotFoundError(
            f"{index_path(path)}: no index for this shard; build it with `datapipe index {name}`"
        )
    buffer = map_file(path)
    companions: dict[str, Any] = {}
    try:
        for suffix in shard_format.companions:
            target = (companion_files or {}).get(suffix)
            if target is None:
                target = shard_format.companion_path(os.fspath(path), suffix)
            companions[suffix] = _map_companion(shard_format, os.fspath(target), suffix, name)
        if size is not None and len(buffer) != size:
            raise ShardCorruptError(name, f"{len(buffer)} bytes, the manifest says {size}")
        if sha256 is not None and sha256_of(LocalFileSystem(), os.fspath(path)) != sha256:
            raise ShardCorruptError(
                name, "sha256 does not match the manifest; the shard was changed or damaged"
            )
        return shard_format.reader(
            buffer, name, shard_index, copy=copy, verify_crc=verify_crc, companions=companions
        )
    except BaseException:
        for mapped in (buffer, *companions.values()):
            release(mapped)
        raise


def _map_companion(shard_format: ShardFormat, target: str, suffix: str, name: str) -> Any:
    """Map companion ``suffix`` of shard ``name``, at ``target``; a missing one says what it
    is."""
    try:
        return map_file(target)
    except NotFoundError:
        raise NotFoundError(
            f"{target}: no such file; a {shard_format.name} shard ({name}) is read with its "
            f"{suffix} file beside it: copy it from where the shard was written"
        ) from None


def read_shard_from(
    fs: Any, path: str, index_file: str, fmt: str | ShardFormat | None = None
) -> ShardReader:
    """Read a whole shard and its index through any fsspec filesystem into memory (``open_shard``
    maps local ones)."""
    index = ShardIndex.from_bytes(read_bytes(fs, index_file), index_file)
    shard_format = _resolve(path, fmt)
    companions = {
        suffix: read_bytes(fs, shard_format.companion_path(path, suffix))
        for suffix in shard_format.companions
    }
    return shard_format.reader(read_bytes(fs, path), path, index, copy=True, companions=companions)


def build_index(path: str | os.PathLike[str], fmt: str | None = None) -> tuple[Path, ShardIndex]:
    """Scan a shard (ours or foreign) and store its index next to it."""
    with open_shard(path, fmt, index=False) as reader:
        built = reader.build_index()
    return write_index(path, built), built
