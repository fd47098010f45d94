"""Several versions' shard files read as one, numbered one after another (a mix's sources)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from datapipe.loader.columns import Column, batch_order
from datapipe.loader.schedule import groups
from datapipe.loader.shard_files import ShardFiles


class ChainedFiles:
    """The shard files of ``parts`` as one numbering: the first part's shards, then the second's.

    A batch of a mix is read part by part, each part's samples through its own ShardFiles (the
    source Dataset's), so what a source has mapped or cached is shared with its other readers.
    """

    def __init__(self, parts: Sequence[ShardFiles]) -> None:
        self.parts = tuple(parts)
        sizes = [len(p) for p in self.parts]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    @property
    def remote(self) -> bool:
        """Whether any part's shards come through the local cache."""
        return any(p.remote for p in self.parts)

    def check(self) -> None:
        """Fail now, naming the shard, when a shard of any part is missing."""
        for files in self.parts:
            files.check()

    def owner(self, shard_ids: np.ndarray) -> np.ndarray:
        """The part of each shard id."""
        return np.searchsorted(self.offsets, shard_ids, side="right") - 1

    def part(self, shard: int) -> tuple[ShardFiles, int]:
        """The files of shard ``shard`` and its number there."""
        owner = int(np.searchsorted(self.offsets, shard, side="right")) - 1
        return self.parts[owner], shard - int(self.offsets[owner])

    def held(self) -> list[int]:
        """Ids of the shards whose cached copies this process holds open."""
        pairs = zip(self.offsets.tolist(), self.parts, strict=False)
        return [offset + s for offset, files in pairs for s in files.held()]

    def _split(self, shard_ids: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """(part, batch positions) of the samples of each part among ``shard_ids``."""
        owner = self.owner(shard_ids)
        return [(p, np.arange(len(owner))[where]) for p, where in groups(owner)]

    def read_columns(
        self, shard_ids: np.ndarray, local: np.ndarray, fields: Sequence[str]
    ) -> tuple[list[str], dict[str, Column]]:
        """Keys and per-field columns of a batch, in batch order, gathered part by part."""
        n = len(shard_ids)
        columns = {name: Column(n) for name in fields}
        keys: list[str] = []
        parts: list[np.ndarray] = []
        for p, slots in self._split(shard_ids):
            numbers = shard_ids[slots] - self.offsets[p]
            part_keys, part_groups = self.parts[p].gather(numbers, local[slots], slots, columns)
            keys.extend(part_keys)
            parts.extend(part_groups)
        if len(parts) > 1:
            keys = [keys[i] for i in batch_order(n, parts).tolist()]
        return keys, columns

    def read_rows(
        self, shard_ids: np.ndarray, local: np.ndarray, sizes: list[int]
    ) -> Iterator[dict[str, Any]]:
        """Consecutive batches of ``sizes`` packed rows (parts are PackedFiles), in batch order,
        each assembled as it is taken."""
        from datapipe.loader.tokens.packed_files import read_mixed_rows

        owner = self.owner(shard_ids)
        return read_mixed_rows(self.parts, owner, shard_ids - self.offsets[owner], local, sizes)

    def keys_of(self, shard_ids: np.ndarray, local: np.ndarray) -> list[str]:
        """The keys of samples, from the shard indexes alone."""
        keys: list[str] = [""] * len(shard_ids)
        for p, slots in self._split(shard_ids):
            numbers = shard_ids[slots] - self.offsets[p]
            found = self.parts[p].keys_of(numbers, local[slots])
            for slot, key in zip(slots.tolist(), found, strict=True):
                keys[slot] = key
        return keys
