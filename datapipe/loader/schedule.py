"""The loader's schedules, as pure functions of shard sizes, a seed, an epoch and a world.

Global order. One order of all samples per (seed, epoch), whatever the world size or worker
count: the shards are permuted by (seed, epoch) and cut into blocks of ``block_shards``
consecutive shards; the samples of a block are permuted together (a generator seeded by
(seed, epoch, block)). A consumer therefore reads from the few shards of one block at a time
(locality for the S3 cache), while samples of neighbouring shards are interleaved. Memory is
O(shards) for the plan plus one block's permutation, computed when the block is reached; no
array over all samples exists.

Batches. Global batch g holds positions [g*G, (g+1)*G) of that order, G = world_size *
batch_size; rank r takes the slice [g*G + r*B, g*G + (r+1)*B). Within a rank, batch steps are
dealt round-robin to its DataLoader workers (step s to worker s % num_workers), which is the
order a DataLoader yields them in. Every rank gets the same number of batches. drop_last=True
drops the last N mod G samples of the epoch (fewer than G); "pad" fills the last global batch
by wrapping around to the start of the epoch's order.

Resumption. The state is the number of samples all ranks consumed in the epoch (``start``);
the remaining positions [start, N) are dealt with whatever world resumes, so a different world
size or worker count finishes the epoch with no sample repeated or skipped (up to the drop).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

DropLast = bool | Literal["pad"]
DEFAULT_BLOCK_SHARDS = 4


def _rng(*words: int) -> np.random.Generator:
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence([w & 0xFFFFFFFF for w in words]))
    )


def runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a stable argsort of ``keys``, where its runs of equal keys start in that order, then
    ``len(keys)``): the one sort that groups and duplicate checks are read from."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    first = [0] if len(keys) else []
    return order, np.concatenate([first, starts, [len(keys)]]).astype(np.int64)


def groups(keys: np.ndarray) -> list[tuple[int, np.ndarray | slice]]:
    """(key, where it is in ``keys``) of each distinct key, ascending: one sort, not a mask per key
    (an epoch has thousands of blocks); a slice when ``keys`` is one run, as a batch's often is."""
    if len(keys) == 0:
        return []
    if keys[0] == keys[-1] and not (keys != keys[0]).any():
        return [(int(keys[0]), slice(None))]
    order, bounds = runs(keys)
    edges = bounds.tolist()
    return [(int(keys[order[a]]), order[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def block_permutation(seed: int, epoch: int, block: int, n: int) -> np.ndarray:
    """The order in which block ``block``'s ``n`` samples (its shards' samples, concatenated) are
    read."""
    return _rng(seed, epoch, block + 1).permutation(n)


@dataclass
class EpochOrder:
    """Maps positions of one epoch's global order to (shard, sample in shard)."""

    shard_sizes: np.ndarray
    seed: int = 0
    epoch: int = 0
    shuffle: bool = True
    block_shards: int = DEFAULT_BLOCK_SHARDS
    _cache: OrderedDict = field(default_factory=OrderedDict, repr=False)

    def __post_init__(self) -> None:
        sizes = np.asarray(self.shard_sizes, dtype=np.int64)
        self.shard_sizes = sizes
        n = len(sizes)
        self.shard_order = (
            _rng(self.seed, self.epoch, 0x5EED).permutation(n) if self.shuffle else np.arange(n)
        )
        permuted = sizes[self.shard_order]
        self.shard_starts = np.concatenate([[0], np.cumsum(sizes)])  # in storage order
        k = max(1, int(self.block_shards))
        self.block_first = np.arange(0, n, k)  # index into shard_order of each block's first shard
        ends = np.concatenate([[0], np.cumsum(permuted)])
        self.block_starts = np.append(ends[self.block_first], ends[-1])
        self._k = k

    @property
    def total(self) -> int:
        """Samples in the epoch."""
        return int(self.shard_starts[-1])

    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(shard ids, offsets into the block's concatenated samples) of block ``b``, permuted."""
        cached = self._cache.get(b)
        if cached is not None:
            self._cache.move_to_end(b)
            return cached
        shards = self.shard_order[self.block_first[b] : self.block_first[b] + self._k]
        sizes = self.shard_sizes[shards]
        owner = np.repeat(np.arange(len(shards)), sizes)
        local = np.arange(int(sizes.sum())) - np.repeat(
            np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes
        )
        if self.shuffle:
            perm = block_permutation(self.seed, self.epoch, b, len(owner))
            owner, local = owner[perm], local[perm]
        result = (shards[owner], local)
        self._cache[b] = result
        while len(self._cache) > 2:
            self._cache.popitem(last=False)
        return result

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard id, index within shard) of each epoch position (0 <= position < total)."""
        positions = np.asarray(positions, dtype=np.int64)
        if not self.shuffle:  # storage order: arithmetic, no arrays over samples
            shard_ids = np.searchsorted(self.shard_starts, positions, side="right") - 1
            return shard_ids, positions - self.shard_starts[shard_ids]
        shard_ids = np.empty(len(positions), dtype=np.int64)
        local = np.empty(len(positions), dtype=np.int64)
        blocks = np.searchsorted(self.block_starts, positions, side="right") - 1
        for b, where in groups(blocks):
            shards, offsets = self._block(b)
            i = positions[where] - self.block_starts[b]
            shard_ids[where], local[where] = shards[i], offsets[i]
        return shard_ids, local

    def spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Per shard, the epoch positions [start, end) within which this order reads it: its block's
        when shuffled (a block's shards are read together), else the shard's own."""
        if not self.shuffle:
            return self.shard_starts[:-1], self.shard_starts[1:]
        n = len(self.shard_sizes)
        block = np.empty(n, dtype=np.int64)
        block[self.shard_order] = np.arange(n) // self._k
        return self.block_starts[block], self.block_starts[block + 1]

    def done_at(self) -> np.ndarray:
        """Per shard, the epoch position from which this order reads it no more."""
        return self.spans()[1]


@dataclass(frozen=True)
class BatchPlan:
    """Which epoch positions each rank's batch steps hold, from global position ``start`` on."""

    total: int
    batch_size: int
    world_size: int = 1
    drop_last: DropLast = True
    start: int = 0

    @property
    def global_batch(self) -> int:
        """Samples per global batch (all ranks)."""
        return self.batch_size * self.world_size

    def num_batches(self) -> int:
        """Batches every rank yields from ``start`` to the end of the epoch."""
        remaining = max(self.total - self.start, 0)
        if self.drop_last == "pad":
            return -(-remaining // self.global_batch) if self.total else 0
        return remaining // self.global_batch

    def positions(self, rank: int, step: int) -> np.ndarray:
        """Epoch positions of rank ``rank``'s batch ``step`` (0 = the first batch after
        ``start``)."""
        base = self.start + step * self.global_batch + rank * self.batch_size
        pos = np.arange(base, base + self.batch_size, dtype=np.int64)
        return pos % self.total if self.drop_last == "pad" else pos

    def raw_positions(self, rank: int, steps: np.ndarray) -> np.ndarray:
        """(steps x batch_size) positions of rank ``rank``'s ``steps`` before the pad's wrap (>=
        total: padding)."""
        base = (
            self.start
            + np.asarray(steps, dtype=np.int64) * self.global_batch
            + rank * self.batch_size
        )
        return base[:, None] + np.arange(self.batch_size, dtype=np.int64)

    def position_after(self, steps: int) -> int:
        """The global position once every rank has consumed ``steps`` batches."""
        return min(self.start + steps * self.global_batch, self.total)


def worker_steps(steps: int | Sequence[int], worker: int, num_workers: int) -> Sequence[int]:
    """The batch steps a DataLoader worker produces: every num_workers-th of ``steps`` (a count:
    range(steps)), starting at its id; the order a DataLoader yields them in is then the order of
    ``steps``."""
    if isinstance(steps, int):
        steps = range(steps)
    return steps[worker :: max(num_workers, 1)]
