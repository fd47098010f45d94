"""A dataset version opened for reading: its manifest, and its shards mapped on demand with their
indexes."""

from __future__ import annotations

import hashlib
import os
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from datapipe.errors import ConfigError, IntegrityError, NotFoundError, SampleError, ShardCorruptError
from datapipe.formats.base import Sample, ShardReader, SpanReader
from datapipe.formats.index import ShardIndex
from datapipe.formats.registry import get_format
from datapipe.formats.shards import open_shard
from datapipe.loader.columns import Column, batch_order
from datapipe.loader.schedule import EpochOrder
from datapipe.storage.cache import CachedFile, ShardCache
from datapipe.storage.fs import is_local
from datapipe.storage.retry import RetryPolicy
from datapipe.versioning.leases import DEFAULT_TTL, Lease, try_lease
from datapipe.versioning.manifest import Manifest, ShardEntry
from datapipe.versioning.store import Store, open_dataset_url

# a shard's samples in a batch that spread over more than SPARSE x their bytes are read by pread
SPARSE = 8
SMALL_SAMPLE = 64 << 10  # ... when they average under this (bigger samples fault in few pages each)
OPEN_FDS = 64  # descriptors kept open for those reads, most recently used


class Dataset:
    """Random access to a version: ``len(ds)``, ``ds[i]`` (global index in storage order),
    ``ds.fields``.

    With ``split``, only that split's shards: shard numbers, indexes and length are those of the
    split alone (``ds.split`` names it; None for the whole version). Shards open lazily, through
    mmap on local disks (other filesystems read the shard whole until the remote cache lands); the
    open readers are per process, never pickled. ``lease``: the lease it holds on its version
    (``open_dataset`` takes one), released by ``close``, when the Dataset is garbage collected, or
    at exit; DataLoader workers hold none of their own.
    """

    def __init__(
        self,
        store: Store,
        name: str,
        manifest: Manifest,
        *,
        verify: bool = False,
        cache: ShardCache | None = None,
        split: str | None = None,
        lease: Lease | None = None,
    ) -> None:
        self.store = store
        self.lease = lease
        if lease is not None:  # released at exit or when this Dataset goes, whichever comes first
            weakref.finalize(self, lease.release)
        self.name = name
        self.manifest = manifest
        self.split = split
        # this dataset's shard entries, in its numbering
        self.shards = _split_shards(manifest, name, split)
        self.verify = verify
        self.cache = cache if cache is not None or is_local(store.fs) else ShardCache()
        self._held: dict[int, tuple[CachedFile, CachedFile]] = {}
        self.format = get_format(manifest.shard_format)
        self.shard_sizes = np.array([s.samples for s in self.shards], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(self.shard_sizes)])
        self._readers: dict[int, ShardReader] = {}
        self._paths: dict[int, str] = {}  # shard -> the local file its reader maps
        # the last OPEN_FDS shards read by pread, open
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._indexes: OrderedDict[int, ShardIndex] = OrderedDict()  # indexes read alone (keys_of)

    @property
    def version(self) -> str:
        """The version id."""
        return self.manifest.version

    @property
    def fields(self) -> dict[str, str]:
        """Field name -> kind (int, float, str, bytes, npy, json) as the build recorded it."""
        return dict(self.manifest.fields)

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def sample_bytes(self) -> float:
        """Mean stored bytes per sample (shard bytes, headers included): what sizes batches'
        memory."""
        return sum(s.bytes for s in self.shards) / max(len(self), 1)

    def __repr__(self) -> str:
        split = f", split {self.split}" if self.split is not None else ""
        return f"Dataset({self.name}@{self.version[:12]}{split}, {len(self)} samples, {len(self.shard_sizes)} shards)"

    def shard_path(self, shard: int, index: bool = False) -> str:
        """Filesystem path of shard number ``shard`` (of its index, with ``index``): in this
        version's directory,
        or in the one it shares the shard from (``stored_in``)."""
        return self.store.shard_file(self.name, self.version, self.shards[shard], index)

    def check_shards(self) -> None:
        """Fail now, naming the shard, when a shard or its index is missing (before workers
        start)."""
        listings: dict[str, set[str]] = {}
        for i, entry in enumerate(self.shards):
            directory = self.store.shard_dir(self.name, self.version, entry)
            # one listing per directory: this version's and those it shares from
            if directory not in listings:
                try:
                    listed = self.store.remote(directory, lambda d=directory: self.store.fs.ls(d, detail=False))
                    listings[directory] = {p.rstrip("/").rsplit("/", 1)[-1] for p in listed}
                except FileNotFoundError:
                    listings[directory] = set()
            present = listings[directory]
            for filename in entry.stored_names():
                if filename not in present:
                    raise NotFoundError(
                        f"{directory}/{filename}: missing from {self.name}@{self.version[:12]} "
                        f"(shard {i}); check the store with "
                        f"`datapipe verify {self.store.url}/{self.name}`"
                    )

    def _open(self, shard: int) -> ShardReader:
        entry = self.shards[shard]
        path = self.shard_path(shard)
        index_file = self.shard_path(shard, index=True)
        try:
            if self.cache is None:
                local = path
            else:  # remote: a verified local copy, mapped like a local shard
                held = self.fetch(shard)
                self._held[shard] = held
                local, index_file = held[0].path, held[1].path
            # the cache verified its copy; a local shard is hashed when asked
            sha256 = entry.sha256 if self.verify and self.cache is None else None
            reader = open_shard(local, self.format, index_file=index_file, name=path, size=entry.bytes, sha256=sha256)
        except (NotFoundError, FileNotFoundError):
            raise NotFoundError(f"{path}: shard {shard} of {self.name}@{self.version[:12]} is missing") from None
        self._paths[shard] = local
        return reader

    def fetch(self, shard: int) -> tuple[CachedFile, CachedFile]:
        """The cached, verified local copies of a remote shard and its index (held until closed)."""
        assert self.cache is not None
        entry = self.shards[shard]
        # keyed by content: a shard two versions share has one cached copy
        data = self.cache.open(self.store.fs, self.shard_path(shard), entry.sha256, entry.bytes)
        try:
            index = self.cache.open(
                self.store.fs, self.shard_path(shard, index=True), entry.index_sha256, entry.index_bytes
            )
        except BaseException:
            data.close()
            raise
        return data, index

    def release(self, shard: int) -> None:
        """Done with ``shard`` for now: unmap it and, for a cached shard, unlock its copy so the
        cache may
        evict it (reading it again opens it again, downloading it if it was evicted)."""
        reader = self._readers.pop(shard, None)
        if reader is not None:
            reader.close()
        self._paths.pop(shard, None)
        fd = self._fds.pop(shard, None)
        if fd is not None:
            os.close(fd)
        held = self._held.pop(shard, ())
        for cached in held:
            cached.close()
        if held and self.cache is not None:
            # now, not at the next download: the cache shrinks back to what is in use
            self.cache.evict()

    def held(self) -> list[int]:
        """Shards whose cached copies this process holds open (locked against eviction)."""
        return sorted(self._held)

    def reader(self, shard: int) -> ShardReader:
        """The open reader of shard ``shard`` (opened on first use in this process)."""
        reader = self._readers.get(shard)
        if reader is None:
            reader = self._readers[shard] = self._open(shard)
        return reader

    def read_columns(
        self, shard_ids: np.ndarray, local: np.ndarray, fields: Sequence[str]
    ) -> tuple[list[str], dict[str, Column]]:
        """Keys and per-field columns of a batch, in batch order, gathered shard by shard."""
        n = len(shard_ids)
        columns = {name: Column(n) for name in fields}
        keys, groups = self.gather(shard_ids, local, np.arange(n), columns)
        if len(groups) > 1:
            keys = [keys[i] for i in batch_order(n, groups).tolist()]
        return keys, columns

    def gather(
        self, shard_ids: np.ndarray, local: np.ndarray, slots: np.ndarray, columns: Mapping[str, Column]
    ) -> tuple[list[str], list[np.ndarray]]:
        """Add the payloads of samples (``shard_ids``, ``local``) to ``columns`` at batch positions
        ``slots``;
        their keys, listed group by group, and the groups' batch positions (one group per shard)."""
        n = len(shard_ids)
        part_keys: list[str] = []
        groups: list[np.ndarray] = []
        first = int(shard_ids[0]) if n else 0
        # one shard: no grouping
        if n and first == int(shard_ids[-1]) and not (shard_ids != first).any():
            parts = [np.arange(n)]
        else:
            order = np.argsort(shard_ids, kind="stable")
            parts = np.split(order, np.flatnonzero(np.diff(shard_ids[order])) + 1) if n else []
        for part in parts:
            shard = int(shard_ids[part[0]])
            reader = self.reader(shard)
            rows = local[part]
            group = slots[part]
            groups.append(group)
            try:
                part_keys.extend(reader.gather_keys(rows))
                scattered = self._read_scattered(shard, reader, rows)
                for name, column in columns.items():
                    # payloads are not byte ranges of the shard
                    if not isinstance(reader, SpanReader):
                        column.add_objects(group, reader.gather(rows, [name])[1][name])
                    elif scattered is not None:
                        copy, shift = scattered
                        offsets, sizes = reader.spans(rows, name)
                        column.add_spans(group, copy, offsets + shift, sizes)
                    else:
                        column.add_spans(group, reader.buffer, *reader.spans(rows, name))
            except SampleError as e:
                raise ConfigError(f"{e}; select the fields every sample has with fields=[...]") from None
        return part_keys, groups

    def order(self, seed: int, epoch: int, shuffle: bool, block_shards: int) -> EpochOrder:
        """The global order of epoch ``epoch`` (built per process; holds one block's permutation at
        a time)."""
        return EpochOrder(self.shard_sizes, seed, epoch, shuffle, block_shards)

    def check_fields(self, fields: Sequence[str] | None, decode: Mapping[str, Any] | None) -> None:
        """Nothing to check beyond ``decoders_for``: one dataset's fields are every sample's."""

    def source_names(self, shard_ids: np.ndarray) -> list[str] | None:
        """None: the samples of one dataset have no source name."""
        return None

    def index(self, shard: int) -> ShardIndex:
        """The index of shard ``shard``, read alone (the shard itself is not fetched) and
        verified."""
        reader = self._readers.get(shard)
        if reader is not None and reader.index is not None:
            return reader.index
        index = self._indexes.get(shard)
        if index is None:
            entry = self.shards[shard]
            path = self.shard_path(shard, index=True)
            try:
                data = self.store.remote(path, lambda: self.store.fs.cat_file(path))
            except FileNotFoundError:
                raise NotFoundError(
                    f"{path}: the index of shard {shard} of {self.name}@{self.version[:12]} is missing"
                ) from None
            if hashlib.sha256(data).hexdigest() != entry.index_sha256:
                raise IntegrityError(
                    f"{path}: the index does not match its sha256 in the manifest; "
                    f"check the store with `datapipe verify {self.store.url}/{self.name}`"
                )
            index = self._indexes[shard] = ShardIndex.from_bytes(data, path)
            if len(self._indexes) > OPEN_FDS:
                self._indexes.popitem(last=False)
        return index

    def keys_of(self, shard_ids: np.ndarray, local: np.ndarray) -> list[str]:
        """The keys of samples, from the shard indexes alone (no payload is read)."""
        return [self.index(shard).key(row) for shard, row in zip(shard_ids.tolist(), local.tolist(), strict=True)]

    def _read_scattered(
        self, shard: int, reader: ShardReader, rows: np.ndarray
    ) -> tuple[memoryview, np.ndarray] | None:
        """Small samples scattered over a shard (a shuffled batch): each one's bytes by one pread
        into a
        buffer, and per sample the shift from shard offsets to that buffer; None to read through the
        map.

        Through the map, each scattered sample faults in its pages, and those pages must be unmapped
        again after the batch to bound resident memory: slower than the reads
        (benchmarks/README.md).
        """
        index = reader.index
        if index is None or shard not in self._paths or len(rows) < 2 or int(rows[-1]) - int(rows[0]) == len(rows) - 1:
            return None  # (consecutive rows: one span of the map, not scattered)
        starts, ends = index.sample_start[rows].astype(np.int64), index.sample_end[rows].astype(np.int64)
        need = int((ends - starts).sum())
        if int(ends.max() - starts.min()) <= SPARSE * need or need > SMALL_SAMPLE * len(rows):
            return None
        fd = self._descriptor(shard)
        copy = memoryview(np.empty(need, dtype=np.uint8))
        at = np.cumsum(ends - starts) - (ends - starts)
        for to, start, end in zip(at.tolist(), starts.tolist(), ends.tolist(), strict=True):
            if os.preadv(fd, [copy[to : to + end - start]], start) != end - start:
                raise ShardCorruptError(reader.name, "shorter than its index says; it changed while being read", start)
        return copy, at - starts

    def _descriptor(self, shard: int) -> int:
        """An open descriptor of the shard's local file; at most OPEN_FDS stay open (a dataset may
        have
        more shards than the process may open files)."""
        fd = self._fds.get(shard)
        if fd is None:
            fd = self._fds[shard] = os.open(self._paths[shard], os.O_RDONLY)
            if len(self._fds) > OPEN_FDS:
                os.close(self._fds.popitem(last=False)[1])
        else:
            self._fds.move_to_end(shard)
        return fd

    def __getitem__(self, i: int) -> Sample:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sample {i} out of range for {n} samples")
        i %= n
        shard = int(np.searchsorted(self._starts, i, side="right") - 1)
        sample = self.reader(shard)[i - int(self._starts[shard])]
        return {k: bytes(v) if isinstance(v, memoryview) else v for k, v in sample.items()}

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release every mapped shard, and the lease on the version (shards still open again when
        read)."""
        if self.lease is not None:
            self.lease.release()
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._paths.clear()
        for held in self._held.values():
            for cached in held:
                cached.close()
        self._held.clear()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        # maps, locks, descriptors: one process
        state["_readers"], state["_held"], state["_paths"] = {}, {}, {}
        state["_fds"], state["_indexes"] = OrderedDict(), OrderedDict()
        state["lease"] = None  # a worker reads under its main process's lease
        return state


def _split_shards(manifest: Manifest, name: str, split: str | None) -> tuple[ShardEntry, ...]:
    """The shards of ``split`` (all of them for None); ConfigError for a split the version does not
    have."""
    if split is None:
        return manifest.shards
    where = f"{name}@{manifest.version[:12]}"
    if manifest.splits is None:
        raise ConfigError(
            f"split={split!r}: {where} has no splits (it was built without a splits section); "
            "open it without split=, or add splits to its pipeline and build again"
        )
    if split not in manifest.splits.fractions:
        raise ConfigError(
            f"split={split!r}: {where} has no split {split!r}; its splits are " + ", ".join(manifest.splits.names)
        )
    return tuple(s for s in manifest.shards if s.split == split)


def open_dataset(
    url: str | Dataset,
    storage_options: Mapping[str, Any] | None = None,
    *,
    verify: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | None = None,
    retries: int | None = None,
    split: str | None = None,
    lease_ttl: float | None = DEFAULT_TTL,
) -> Dataset:
    """Open 'STORE/NAME[@REF]' (a tag, 'latest' or a version prefix) for reading.

    ``split``: only that split of a version built with splits (``Dataset.split``); an open Dataset
    of the whole version gives that split of it, one of that split itself.

    Shards of a remote store (s3://, ...) are read through a local cache in ``cache_dir``
    (default: $DATAPIPE_CACHE or ~/.cache/datapipe/shards) kept under ``cache_limit`` bytes.
    ``retries``: tries in all for each read of the store and each download after transient errors
    (default $DATAPIPE_RETRIES, else 6; 1 = no retry).

    The Dataset holds a lease on its version until ``close`` (docs/guide/versions.md): ``gc`` does
    not delete a leased version. It lasts ``lease_ttl`` seconds and is renewed every third of that
    in a background thread; None: no lease. A store that refuses the write (a read-only bucket) is
    read without one.
    """
    if isinstance(url, Dataset):
        if split is None or split == url.split:
            return url
        if url.split is not None:
            raise ConfigError(
                f"split={split!r}: this Dataset is split {url.split!r} of {url.name}; open "
                f"split {split!r} from the dataset's URL or from the whole version"
            )
        return Dataset(url.store, url.name, url.manifest, verify=url.verify, cache=url.cache, split=split)
    policy = RetryPolicy.from_env(attempts=retries)
    store, name, manifest = open_dataset_url(os.fspath(url), storage_options, policy)
    cache = None if is_local(store.fs) else ShardCache(cache_dir, cache_limit, policy)
    # bad split: no lease
    dataset = Dataset(store, name, manifest, verify=verify, cache=cache, split=split)
    lease = try_lease(store, name, manifest.version, lease_ttl)
    if lease is not None:
        dataset.lease = lease
        weakref.finalize(dataset, lease.release)
    return dataset
