"""A mix's global order, as a pure function of its sources' shard sizes, weights, seed and epoch.

The mixed stream runs across epochs: epoch e holds stream positions [e * M, (e + 1) * M), M the
mix's epoch_samples. Which source a position draws from is the interleave of the weights
(loader/interleave.py), from the start of the current ``Segment`` (the run's start, or the resume
at which the weights changed). Source s's items follow its passes: its t-th item is sample
t mod N_s of pass t // N_s, and pass p is the order of one epoch of that source alone
(``EpochOrder`` seeded by the mix seed and the source's name, epoch p): the same block-wise
shuffle as one dataset's, a permutation of the source, so no sample repeats within a pass.

``block_shards`` counts the shards the whole mix reads side by side: each of its k sources (of
weight > 0) has blocks of max(1, block_shards // k) shards. A batch then spans about as many shards
as one dataset's, which is what its cost per batch and a remote cache's footprint go by.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from datapipe.errors import ConfigError
from datapipe.loader.interleave import Interleave
from datapipe.loader.schedule import EpochOrder, groups


@dataclass(frozen=True)
class Segment:
    """Where the current weights took over: stream position ``start``, with each source's items so
    far."""

    start: int = 0
    cursors: tuple[int, ...] = ()


def source_seed(seed: int, name: str) -> int:
    """The seed of a source's passes: the mix seed salted with the source's name (not its place in
    the mix)."""
    return (seed * 0x9E3779B1 ^ zlib.crc32(name.encode())) & 0xFFFFFFFF


class MixOrder:
    """Epoch positions of a mix -> (global shard id, sample in shard); global ids number the
    sources' shards one source after the other."""

    def __init__(
        self,
        names: tuple[str, ...],
        sizes: tuple[np.ndarray, ...],
        interleave: Interleave,
        segment: Segment,
        epoch_samples: int,
        seed: int,
        epoch: int,
        shuffle: bool,
        block_shards: int,
    ) -> None:
        self.names, self.sizes, self.interleave, self.segment = names, sizes, interleave, segment
        self.epoch_samples, self.seed, self.epoch = epoch_samples, seed, epoch
        self.shuffle, self.block_shards = shuffle, block_shards
        self.samples = np.array([int(s.sum()) for s in sizes], dtype=np.int64)
        self.source_block = max(1, int(block_shards) // max(int((interleave.quota > 0).sum()), 1))
        self.shard_offsets = np.concatenate([[0], np.cumsum([len(s) for s in sizes])]).astype(
            np.int64
        )
        self._passes: OrderedDict[tuple[int, int], EpochOrder] = OrderedDict()

    @property
    def total(self) -> int:
        """Positions in the epoch."""
        return self.epoch_samples

    def items(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, the source's item number counted from the run's start) of each epoch
        position."""
        stream = self.epoch * self.epoch_samples + np.asarray(positions, dtype=np.int64)
        if len(stream) and int(stream.min()) < self.segment.start:
            raise ConfigError(
                f"epoch {self.epoch} position "
                f"{int(stream.min()) - self.epoch * self.epoch_samples} "
                f"was read before the weights changed at stream position {self.segment.start}; "
                "this mix's state no longer describes it"
            )
        source, index = self.interleave.locate(stream - self.segment.start)
        return source, np.asarray(self.segment.cursors, dtype=np.int64)[source] + index

    def _pass(self, source: int, number: int) -> EpochOrder:
        key = (source, number)
        order = self._passes.get(key)
        if order is None:
            order = self._passes[key] = EpochOrder(
                self.sizes[source],
                source_seed(self.seed, self.names[source]),
                number,
                self.shuffle,
                self.source_block,
            )
            if len(self._passes) > 2 * len(self.names):
                self._passes.popitem(last=False)
        else:
            self._passes.move_to_end(key)
        return order

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(global shard id, index within shard) of each epoch position."""
        source, item = self.items(positions)
        passes, within = np.divmod(item, self.samples[source])
        shard_ids = np.empty(len(source), dtype=np.int64)
        local = np.empty(len(source), dtype=np.int64)
        width = int(passes.max()) + 1 if len(passes) else 1
        for key, where in groups(source * width + passes):
            s, p = divmod(key, width)
            shards, rows = self._pass(s, p).locate(within[where])
            shard_ids[where], local[where] = shards + self.shard_offsets[s], rows
        return shard_ids, local

    def done_at(self) -> np.ndarray:
        """Per global shard, the epoch position after its last read in this epoch (0: not read in
        it).

        A source may be read in several passes in one epoch; its shard is held from its first read
        to its last, in the last pass that reads it (a source read again and again stays in the
        cache meanwhile).
        """
        done = np.zeros(int(self.shard_offsets[-1]), dtype=np.int64)
        # (before the segment: never read)
        first = max(self.epoch * self.epoch_samples, self.segment.start)
        end = (self.epoch + 1) * self.epoch_samples
        if end <= first:
            return done
        lo_all = np.asarray(self.segment.cursors) + self.interleave.counts(
            first - self.segment.start
        )
        hi_all = np.asarray(self.segment.cursors) + self.interleave.counts(end - self.segment.start)
        for s, (lo, hi) in enumerate(zip(lo_all.tolist(), hi_all.tolist(), strict=True)):
            n = int(self.samples[s])
            if hi <= lo or n == 0:
                continue
            last_pass = (hi - 1) // n
            # the last two passes decide
            for p in range(max(lo // n, last_pass - 1), last_pass + 1):
                starts, ends = self._pass(s, p).spans()
                begin, finish = p * n + starts, np.minimum(p * n + ends, hi)
                read = (begin < hi) & (finish > np.maximum(begin, lo))
                last_item = finish[read] - 1 - np.asarray(self.segment.cursors)[s]
                position = self.interleave.position_of(s, last_item) + self.segment.start + 1
                shards = np.flatnonzero(read) + int(self.shard_offsets[s])
                done[shards] = position - self.epoch * self.epoch_samples
        return done
