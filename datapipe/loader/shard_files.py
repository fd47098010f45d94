"""One version's shard files as a process reads them: mapped on demand, cached, gathered into
columns."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from datapipe.errors import (
    ConfigError,
    IntegrityError,
    NotFoundError,
    SampleError,
    ShardCorruptError,
)
from datapipe.formats.base import ShardReader, SpanReader
from datapipe.formats.index import ShardIndex
from datapipe.formats.registry import ShardFormat
from datapipe.formats.shards import open_shard
from datapipe.loader.columns import Column, batch_order
from datapipe.loader.preads import ScatteredReads
from datapipe.loader.schedule import groups
from datapipe.storage.cache import CachedFile, ShardCache
from datapipe.storage.fs import sha256_of
from datapipe.versioning.manifest import ShardEntry, short_id
from datapipe.versioning.store import Store

INDEXES_KEPT = 64  # indexes read alone (``index``) kept, most recently used


class ShardFiles:
    """The shard files of one version of dataset ``name`` (or of one split: ``entries`` are its
    shards, numbered from 0), as one process reads them.

    Shards open lazily, through mmap on local disks. With ``cache`` (a remote store), a shard is
    read from a verified local copy held from ``fetch`` until ``release``, so that the cache may
    evict it. ``verify``: a local shard is hashed when it opens. The readers, held copies and
    descriptors are this process's: a pickled ShardFiles (a DataLoader worker's) opens its own.
    """

    def __init__(
        self,
        store: Store,
        name: str,
        version: str,
        entries: Sequence[ShardEntry],
        shard_format: ShardFormat,
        *,
        cache: ShardCache | None = None,
        verify: bool = False,
    ) -> None:
        self.store, self.name, self.version = store, name, version
        self.entries = tuple(entries)
        self.format = shard_format
        self.cache = cache
        self.verify = verify
        self._readers: dict[int, ShardReader] = {}
        self._paths: dict[int, str] = {}  # shard -> the local file its reader maps
        # shard -> its held copies: the shard, its index, then its companions
        self._held: dict[int, tuple[CachedFile, ...]] = {}
        self._preads = ScatteredReads()
        self._indexes: OrderedDict[int, ShardIndex] = OrderedDict()  # read alone (``index``)

    @property
    def remote(self) -> bool:
        """Whether shards come through the local cache (fetched, held, released)."""
        return self.cache is not None

    def __len__(self) -> int:
        """Shards."""
        return len(self.entries)

    def part(self, shard: int) -> tuple[ShardFiles, int]:
        """The files of shard ``shard`` and its number there: these, and the same number."""
        return self, shard

    def path(self, shard: int, index: bool = False) -> str:
        """Filesystem path of shard ``shard`` (of its index, with ``index``): in this version's
        directory, or in the one it shares the shard from (``stored_in``)."""
        return self.store.shard_file(self.name, self.version, self.entries[shard], index)

    def check(self) -> None:
        """Fail now, naming the shard, when a shard, its index or a companion is missing (before
        workers start)."""
        listings: dict[str, set[str]] = {}
        for i, entry in enumerate(self.entries):
            directory = self.store.shard_dir(self.name, self.version, entry)
            # one listing per directory: this version's and those it shares from
            if directory not in listings:
                listings[directory] = self._listing(directory)
            for filename in entry.stored_files():
                if filename not in listings[directory]:
                    raise NotFoundError(
                        f"{directory}/{filename}: missing from "
                        f"{self.name}@{short_id(self.version)} "
                        f"(shard {i}); check the store with "
                        f"`datapipe verify {self.store.url}/{self.name}`"
                    )

    def _listing(self, directory: str) -> set[str]:
        """The file names in ``directory`` (none when it is missing)."""
        try:
            listed = self.store.remote(directory, lambda: self.store.fs.ls(directory, detail=False))
        except FileNotFoundError:
            return set()
        return {p.rstrip("/").rsplit("/", 1)[-1] for p in listed}

    def reader(self, shard: int) -> ShardReader:
        """The open reader of shard ``shard`` (opened on first use in this process)."""
        reader = self._readers.get(shard)
        if reader is None:
            reader = self._readers[shard] = self._open(shard)
        return reader

    def open_reader(self, shard: int) -> ShardReader | None:
        """The reader of shard ``shard`` if this process has it open, else None (nothing opened)."""
        return self._readers.get(shard)

    def _open(self, shard: int) -> ShardReader:
        entry = self.entries[shard]
        path = self.path(shard)
        index_file = self.path(shard, index=True)
        companions = self.companion_paths(shard)
        try:
            if self.cache is None:
                local = path
            else:  # remote: verified local copies, mapped like a local shard's files
                held = self.fetch(shard)
                self._held[shard] = held
                local, index_file = held[0].path, held[1].path
                companions = {s: c.path for s, c in zip(companions, held[2:], strict=True)}
            # the cache verified its copies; a local shard and its companions are hashed when asked
            sha256 = entry.sha256 if self.verify and self.cache is None else None
            if sha256 is not None:
                self._verify_companions(shard, companions)
            reader = open_shard(
                local,
                self.format,
                index_file=index_file,
                name=path,
                size=entry.bytes,
                sha256=sha256,
                companion_files=companions,
            )
        except (NotFoundError, FileNotFoundError):
            raise NotFoundError(self._missing(shard)) from None
        self._paths[shard] = local
        return reader

    def _missing(self, shard: int) -> str:
        """What an open of shard ``shard`` found missing: a companion, else the shard."""
        where = f"shard {shard} of {self.name}@{short_id(self.version)}"
        for suffix, path in self.companion_paths(shard).items():
            if not self.store.remote(path, lambda p=path: self.store.fs.exists(p)):
                return (
                    f"{path}: the {suffix} file of {where} is missing; check the store with "
                    f"`datapipe verify {self.store.url}/{self.name}`"
                )
        return f"{self.path(shard)}: {where} is missing"

    def _verify_companions(self, shard: int, paths: Mapping[str, str]) -> None:
        """ShardCorruptError naming the companion of local shard ``shard`` whose sha256 is not
        the manifest's."""
        for companion in self.entries[shard].companions:
            path = paths[companion.suffix]
            if sha256_of(self.store.fs, path) != companion.sha256:
                raise ShardCorruptError(
                    path,
                    f"sha256 does not match the manifest (a companion of {self.path(shard)}); "
                    f"check the store with `datapipe verify {self.store.url}/{self.name}`",
                )

    def companion_paths(self, shard: int) -> dict[str, str]:
        """Suffix -> path of each companion file of shard ``shard``, in the directory that holds
        it."""
        entry = self.entries[shard]
        directory = self.store.shard_dir(self.name, self.version, entry)
        return {c.suffix: f"{directory}/{filename}" for c, filename in entry.companion_names()}

    def fetch(self, shard: int) -> tuple[CachedFile, ...]:
        """The cached, verified local copies of a remote shard, its index and its companions, in
        that order (held until closed)."""
        assert self.cache is not None
        entry = self.entries[shard]
        wanted = [
            (self.path(shard), entry.sha256, entry.bytes),
            (self.path(shard, index=True), entry.index_sha256, entry.index_bytes),
        ]
        paths = self.companion_paths(shard)
        wanted += [(paths[c.suffix], c.sha256, c.bytes) for c in entry.companions]
        cache, fs = self.cache, self.store.fs
        # keyed by content: a shard two versions share has one cached copy
        return held_together(
            lambda p=path, h=sha256, n=size: (cache.open(fs, p, h, n),)
            for path, sha256, size in wanted
        )

    def release(self, shard: int) -> None:
        """Done with ``shard`` for now: unmap it and, for a cached shard, unlock its copy so the
        cache may evict it (reading it again opens it again, downloading it if it was evicted)."""
        reader = self._readers.pop(shard, None)
        if reader is not None:
            reader.close()
        self._paths.pop(shard, None)
        self._preads.forget(shard)
        held = self._held.pop(shard, ())
        for cached in held:
            cached.close()
        if held and self.cache is not None:
            # now, not at the next download: the cache shrinks back to what is in use
            self.cache.evict()

    def held(self) -> list[int]:
        """Shards whose cached copies this process holds open (locked against eviction)."""
        return sorted(self._held)

    def read_columns(
        self, shard_ids: np.ndarray, local: np.ndarray, fields: Sequence[str]
    ) -> tuple[list[str], dict[str, Column]]:
        """Keys and per-field columns of a batch, in batch order, gathered shard by shard."""
        n = len(shard_ids)
        columns = {name: Column(n) for name in fields}
        keys, parts = self.gather(shard_ids, local, np.arange(n), columns)
        if len(parts) > 1:
            keys = [keys[i] for i in batch_order(n, parts).tolist()]
        return keys, columns

    def gather(
        self,
        shard_ids: np.ndarray,
        local: np.ndarray,
        slots: np.ndarray,
        columns: Mapping[str, Column],
    ) -> tuple[list[str], list[np.ndarray]]:
        """Add the payloads of samples (``shard_ids``, ``local``) to ``columns`` at batch positions
        ``slots``; their keys, listed group by group, and the groups' batch positions (one group
        per shard)."""
        keys: list[str] = []
        parts: list[np.ndarray] = []
        for shard, where in groups(shard_ids):
            reader = self.reader(shard)
            rows, part = local[where], slots[where]
            parts.append(part)
            try:
                keys.extend(reader.gather_keys(rows))
                self._add_payloads(shard, reader, rows, part, columns)
            except SampleError as e:
                hint = "select the fields every sample has with fields=[...]"
                raise ConfigError(f"{e}; {hint}") from None
        return keys, parts

    def _add_payloads(
        self,
        shard: int,
        reader: ShardReader,
        rows: np.ndarray,
        slots: np.ndarray,
        columns: Mapping[str, Column],
    ) -> None:
        """The payloads of ``rows`` of one shard into ``columns``: byte ranges of its map, or of
        one buffer of preads when the rows are small and scattered, or objects (TFRecord)."""
        path = self._paths.get(shard)
        scattered = None if path is None else self._preads.read(shard, path, reader, rows)
        for name, column in columns.items():
            # payloads are not byte ranges of the shard
            if not isinstance(reader, SpanReader):
                column.add_objects(slots, reader.gather(rows, [name])[1][name])
            elif scattered is not None:
                copy, shift = scattered
                offsets, sizes = reader.spans(rows, name)
                column.add_spans(slots, copy, offsets + shift, sizes)
            else:
                column.add_spans(slots, reader.buffer, *reader.spans(rows, name))

    def index(self, shard: int) -> ShardIndex:
        """The index of shard ``shard``, read alone (the shard itself is not fetched) and
        verified."""
        reader = self._readers.get(shard)
        if reader is not None and reader.index is not None:
            return reader.index
        index = self._indexes.get(shard)
        if index is None:
            index = self._indexes[shard] = self._read_index(shard)
            if len(self._indexes) > INDEXES_KEPT:
                self._indexes.popitem(last=False)
        return index

    def _read_index(self, shard: int) -> ShardIndex:
        path = self.path(shard, index=True)
        try:
            data = self.store.remote(path, lambda: self.store.fs.cat_file(path))
        except FileNotFoundError:
            where = f"shard {shard} of {self.name}@{short_id(self.version)}"
            raise NotFoundError(f"{path}: the index of {where} is missing") from None
        if hashlib.sha256(data).hexdigest() != self.entries[shard].index_sha256:
            raise IntegrityError(
                f"{path}: the index does not match its sha256 in the manifest; "
                f"check the store with `datapipe verify {self.store.url}/{self.name}`"
            )
        return ShardIndex.from_bytes(data, path)

    def keys_of(self, shard_ids: np.ndarray, local: np.ndarray) -> list[str]:
        """The keys of samples, from the shard indexes alone (no payload is read)."""
        pairs = zip(shard_ids.tolist(), local.tolist(), strict=True)
        return [self.index(shard).key(row) for shard, row in pairs]

    def close(self) -> None:
        """Unmap every shard and let go of every cached copy (shards open again when read)."""
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
        self._preads.close()
        self._paths.clear()
        for held in self._held.values():
            for cached in held:
                cached.close()
        self._held.clear()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        # maps, locks, descriptors: one process
        state["_readers"], state["_held"], state["_paths"] = {}, {}, {}
        state["_indexes"] = OrderedDict()
        return state


def held_together(opens: Iterable[Callable[[], Iterable[CachedFile]]]) -> tuple[CachedFile, ...]:
    """The cached copies each of ``opens`` gives, held as one: if any fails, those already held
    are closed before the error goes on."""
    held: list[CachedFile] = []
    try:
        for open_ in opens:
            held.extend(open_())
    except BaseException:
        for cached in held:
            cached.close()
        raise
    return tuple(held)
