"""A dataset version opened for reading: its manifest, its sizes and order, random access."""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from datapipe.errors import ConfigError
from datapipe.formats.base import Sample
from datapipe.formats.index import ShardIndex
from datapipe.formats.registry import get_format
from datapipe.formats.tokens.reader import TokensShardReader
from datapipe.loader.columns import Column
from datapipe.loader.schedule import EpochOrder
from datapipe.loader.shard_files import ShardFiles
from datapipe.storage.cache import ShardCache
from datapipe.storage.fs import is_local
from datapipe.storage.retry import RetryPolicy
from datapipe.versioning.leases import DEFAULT_TTL, Lease, try_lease
from datapipe.versioning.manifest import Manifest, ShardEntry, short_id
from datapipe.versioning.store import Store, open_dataset_url


class Dataset:
    """Random access to a version: ``len(ds)``, ``ds[i]`` (global index in storage order),
    ``ds.fields``.

    With ``split``, only that split's shards: shard numbers, indexes and length are those of the
    split alone (``ds.split`` names it; None for the whole version). Its shards are read through
    ``ds.files`` (loader/shard_files.py): opened lazily, through mmap on local disks, a remote
    store's through the local cache; the open readers are per process, never pickled. ``lease``:
    the lease it holds on its version (``open_dataset`` takes one), released by ``close``, when the
    Dataset is garbage collected, or at exit; DataLoader workers hold none of their own.
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
        self.format = get_format(manifest.shard_format)
        self.files = ShardFiles(
            store, name, manifest.version, self.shards, self.format, cache=self.cache, verify=verify
        )
        self.shard_sizes = np.array([s.samples for s in self.shards], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(self.shard_sizes)])

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
        size = f"{len(self)} samples, {len(self.shard_sizes)} shards"
        return f"Dataset({self.name}@{short_id(self.version)}{split}, {size})"

    def __getitem__(self, i: int) -> Sample:
        shard, row = self._locate(i)
        sample = self.files.reader(shard)[row]
        return {k: bytes(v) if isinstance(v, memoryview) else v for k, v in sample.items()}

    def tokens(self, i: int) -> np.ndarray:
        """The token ids of document ``i`` (global index in storage order) of a token version
        (``shards.format: tokens``): a read-only numpy view of its mapped shard, valid while the
        Dataset is open. ``ds[i]["tokens"]`` holds the same ids; a ConfigError for a version of
        another format."""
        if self.format.name != "tokens":
            raise ConfigError(
                f"{self.name}@{short_id(self.version)}: tokens(i) reads a version of token "
                f"shards (shards.format: tokens); this one's shards are {self.format.name}: "
                "read its samples with ds[i]"
            )
        shard, row = self._locate(i)
        reader = self.files.reader(shard)
        assert isinstance(reader, TokensShardReader)
        return reader.tokens(row)

    def _locate(self, i: int) -> tuple[int, int]:
        """The shard and row of sample ``i`` (negative: from the end); IndexError past the end."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sample {i} out of range for {n} samples")
        i %= n
        shard = int(np.searchsorted(self._starts, i, side="right") - 1)
        return shard, i - int(self._starts[shard])

    def order(self, seed: int, epoch: int, shuffle: bool, block_shards: int) -> EpochOrder:
        """The global order of epoch ``epoch`` (built per process; holds one block's permutation at
        a time)."""
        return EpochOrder(self.shard_sizes, seed, epoch, shuffle, block_shards)

    def check_fields(self, fields: Sequence[str] | None, decode: Mapping[str, Any] | None) -> None:
        """Nothing to check beyond ``decoders_for``: one dataset's fields are every sample's."""

    def source_names(self, shard_ids: np.ndarray) -> list[str] | None:
        """None: the samples of one dataset have no source name."""
        return None

    def shard_path(self, shard: int, index: bool = False) -> str:
        """Filesystem path of shard number ``shard`` (of its index, with ``index``): in this
        version's directory, or in the one it shares the shard from (``stored_in``)."""
        return self.files.path(shard, index)

    def index(self, shard: int) -> ShardIndex:
        """The index of shard ``shard``, read alone (the shard itself is not fetched) and
        verified."""
        return self.files.index(shard)

    def keys_of(self, shard_ids: np.ndarray, local: np.ndarray) -> list[str]:
        """The keys of samples, from the shard indexes alone (no payload is read)."""
        return self.files.keys_of(shard_ids, local)

    def read_columns(
        self, shard_ids: np.ndarray, local: np.ndarray, fields: Sequence[str]
    ) -> tuple[list[str], dict[str, Column]]:
        """Keys and per-field columns of a batch, in batch order, gathered shard by shard."""
        return self.files.read_columns(shard_ids, local, fields)

    def held(self) -> list[int]:
        """Shards whose cached copies this process holds open (locked against eviction)."""
        return self.files.held()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release every mapped shard, and the lease on the version (shards still open again when
        read)."""
        if self.lease is not None:
            self.lease.release()
        self.files.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["lease"] = None  # a worker reads under its main process's lease
        return state


def _split_shards(manifest: Manifest, name: str, split: str | None) -> tuple[ShardEntry, ...]:
    """The shards of ``split`` (all of them for None); ConfigError for a split the version does not
    have."""
    if split is None:
        return manifest.shards
    where = f"{name}@{short_id(manifest.version)}"
    if manifest.splits is None:
        raise ConfigError(
            f"split={split!r}: {where} has no splits (it was built without a splits section); "
            "open it without split=, or add splits to its pipeline and build again"
        )
    if split not in manifest.splits.fractions:
        raise ConfigError(
            f"split={split!r}: {where} has no split {split!r}; its splits are "
            + ", ".join(manifest.splits.names)
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
        return Dataset(
            url.store, url.name, url.manifest, verify=url.verify, cache=url.cache, split=split
        )
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
