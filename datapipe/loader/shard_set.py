"""What a BatchSource reads from: one dataset version, or a mix of several, as numbered shards."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from datapipe.loader.columns import Column
from datapipe.loader.shard_files import ShardFiles


class Order(Protocol):
    """One epoch's global order: epoch positions -> (shard, sample in shard)."""

    @property
    def total(self) -> int:
        """Positions in the epoch."""

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard id, index within shard) of each epoch position."""

    def done_at(self) -> np.ndarray | None:
        """Per shard, the epoch position from which the order reads it no more (None: not known)."""


class Files(Protocol):
    """A shard set's files as this process reads them, in its numbering: ``ShardFiles`` of one
    version, or ``ChainedFiles`` of a mix's sources."""

    @property
    def remote(self) -> bool:
        """Whether shards come through the local cache (fetched, held, released)."""

    def check(self) -> None:
        """Fail now, naming the shard, when one is missing."""

    def part(self, shard: int) -> tuple[ShardFiles, int]:
        """The one version's files that hold shard ``shard``, and its number there."""

    def read_columns(
        self, shard_ids: np.ndarray, local: np.ndarray, fields: Sequence[str]
    ) -> tuple[list[str], dict[str, Column]]:
        """Keys and per-field columns of a batch, in batch order."""

    def keys_of(self, shard_ids: np.ndarray, local: np.ndarray) -> list[str]:
        """The keys of samples, from the shard indexes alone (no payload is read)."""


class ShardSet(Protocol):
    """Numbered shards with sizes and fields, an order per epoch, and the files they are read from;
    ``Dataset`` and ``Mix`` are the two kinds."""

    shard_sizes: np.ndarray
    files: Files

    @property
    def version(self) -> str:
        """What the loader's state names: a version id, or the mix's sources and versions."""

    @property
    def fields(self) -> dict[str, str]:
        """Field name -> kind, of every sample."""

    @property
    def sample_bytes(self) -> float:
        """Mean stored bytes per sample."""

    def __len__(self) -> int:
        """Samples in one epoch."""

    def order(self, seed: int, epoch: int, shuffle: bool, block_shards: int) -> Order:
        """The global order of epoch ``epoch``."""

    def check_fields(self, fields: Sequence[str] | None, decode: Mapping[str, Any] | None) -> None:
        """Fail now, naming the source, when a field asked for is not in every sample."""

    def source_names(self, shard_ids: np.ndarray) -> list[str] | None:
        """The source name of each sample of a mix (None for one dataset)."""

    def close(self) -> None:
        """Release every shard, and the leases on the versions."""
