"""What produces a rank's batches: picklable, O(shards) in size, the same in every DataLoader worker."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from datapipe.loader.collate import Decoder, collate, decoders_for
from datapipe.loader.dataset import Dataset
from datapipe.loader.download import Downloader, first_uses
from datapipe.loader.pool import BufferPool
from datapipe.loader.schedule import BatchPlan, EpochOrder
from datapipe.loader.settings import LoaderSettings
from datapipe.loader.world import World

DROP_BYTES = 8 << 20  # a batch source unmaps the shard pages it has read once they add up to this
CHUNK_BYTES = 8 << 20  # small batches are read and collated this many stored bytes at a time ...
CHUNK_BATCHES = 8  # ... but at most this many batches at once


@dataclass(frozen=True)
class BatchSource:
    """Rank ``world.rank``'s batches of epoch ``epoch`` under ``settings``, read from ``dataset``, starting at
    epoch position ``position`` (the samples all ranks consumed of the epoch so far)."""

    dataset: Dataset
    settings: LoaderSettings
    world: World
    epoch: int = 0
    position: int = 0
    decoders: dict[str, Decoder] = field(init=False, repr=False)

    def __post_init__(self) -> None:  # the fields and decoders asked for, checked against the dataset's now
        decoders = decoders_for(self.dataset.fields, self.settings.fields, self.settings.decode)
        object.__setattr__(self, "decoders", decoders)

    @cached_property
    def plan(self) -> BatchPlan:
        """Which epoch positions each of the world's batch steps holds, from ``position`` on."""
        settings = self.settings
        return BatchPlan(len(self.dataset), settings.batch_size, self.world.world_size, settings.drop_last,
                         self.position)

    def _shards(self, order: EpochOrder, steps: Iterable[int]) -> Iterator[list[int]]:
        for step in steps:
            shard_ids, _ = order.locate(self.plan.positions(self.world.rank, step))
            yield list(dict.fromkeys(shard_ids.tolist()))

    def done_at(self, order: EpochOrder) -> np.ndarray:
        """Per shard, the epoch position from which ``order`` reads it no more: the end of its block when
        shuffled (a block's shards are read together), else the end of the shard itself."""
        if not self.settings.shuffle:
            return order.shard_starts[1:]
        n = len(order.shard_sizes)
        block = np.empty(n, dtype=np.int64)
        block[order.shard_order] = np.arange(n) // max(1, int(self.settings.block_shards))
        return order.block_starts[block + 1]

    def order(self) -> EpochOrder:
        """The epoch's global order (built per process; holds one block's permutation at a time)."""
        settings = self.settings
        return EpochOrder(self.dataset.shard_sizes, settings.seed, self.epoch, settings.shuffle,
                          settings.block_shards)

    def chunk_batches(self, defer_ragged: bool) -> int:
        """How many consecutive steps to read and collate as one: about half of a small batch's cost is per
        batch, not per sample (W1: ~1 us a sample at batch 256, ~0.6 at 2048). Only where that changes
        nothing a user sees: batches come out the same, no decoder of theirs runs ahead, and a remote
        dataset's cache holds the shards of one batch in use, not of several."""
        if defer_ragged or self.dataset.cache is not None \
                or any(callable(d) or d == "image" for d in self.decoders.values()):
            return 1
        batch_bytes = self.dataset.sample_bytes * self.plan.batch_size
        return int(max(1, min(CHUNK_BATCHES, CHUNK_BYTES // max(batch_bytes, 1))))

    def produce(self, steps: Iterable[int], finish: Callable[[dict[str, Any]], Any] | None = None,
                defer_ragged: bool = False) -> Iterator[Any]:
        """The collated batches of ``steps`` (batch numbers after the plan's start), in order.

        ``finish`` turns each batch into what is yielded (tensors, say), in this thread and while its
        shards are still mapped; with ``defer_ragged``, ragged fields stay ``collate.Ragged`` for
        ``finish`` (``packing.pack``) to gather straight into its buffer. Small batches are read and
        collated a few at a time (``chunk_batches``), then cut apart.

        Remote (cached) shards are released as soon as no later step of ``steps`` reads them (steps
        ascend, so positions do: a shard is done once the next step starts past ``done_at``), which
        lets the cache evict them mid-epoch: it holds the shards in use plus ``download_ahead``.
        """
        order = self.order()
        if not isinstance(steps, range):
            steps = list(steps)  # read twice (the downloader's order, then the batches); a range stays O(1)
        downloader = None
        if self.settings.download_ahead and self.dataset.cache is not None:
            downloader = Downloader(self.dataset, first_uses(self._shards(self.order(), steps)),
                                    self.settings.download_ahead)
        done_at = self.done_at(order) if self.dataset.cache is not None else None
        in_use: set[int] = set()
        opened: set[int] = set()
        pool = BufferPool()
        mapped: set[int] = set()
        unmapped_bytes = 0
        sample_bytes = self.dataset.sample_bytes
        chunk = self.chunk_batches(defer_ragged)
        upcoming = iter(steps)
        following = next(upcoming, None)
        try:
            while following is not None:
                chunk_steps = [following]
                following = next(upcoming, None)
                while following is not None and len(chunk_steps) < chunk:
                    chunk_steps.append(following)
                    following = next(upcoming, None)
                positions = [self.plan.positions(self.world.rank, step) for step in chunk_steps]
                shard_ids, local = order.locate(positions[0] if chunk == 1 else np.concatenate(positions))
                keys, columns = self.dataset.read_columns(shard_ids, local, list(self.decoders))
                if downloader is not None:  # after the read: the consumer holds the shards it opened now
                    for shard in dict.fromkeys(shard_ids.tolist()):
                        if shard not in opened:
                            opened.add(shard)
                            downloader.consumed(shard)
                collated = collate(keys, columns, self.decoders, defer=defer_ragged, allocate=pool.allocate)
                del columns
                batches = [collated] if chunk == 1 else cut(collated, [len(p) for p in positions])
                if finish is not None:
                    batches = [finish(batch) for batch in batches]
                # resident memory: the pages of the last few MB read, not of every shard read so far
                mapped.update(shard_ids.tolist())
                unmapped_bytes += len(shard_ids) * sample_bytes
                if unmapped_bytes >= DROP_BYTES:
                    for shard in mapped:
                        self.dataset.reader(shard).drop_pages()
                    mapped.clear()
                    unmapped_bytes = 0
                if done_at is not None:
                    in_use.update(shard_ids.tolist())
                    after = None if following is None else int(self.plan.positions(self.world.rank, following).min())
                    for shard in [s for s in in_use if after is None or done_at[s] <= after]:
                        in_use.discard(shard)
                        mapped.discard(shard)
                        self.dataset.release(shard)
                del collated
                while batches:
                    yield batches.pop(0)
        finally:
            if downloader is not None:
                downloader.close()
            for shard in in_use:  # stopped early: let the cache have them back
                self.dataset.release(shard)


def cut(batch: dict[str, Any], sizes: list[int]) -> list[dict[str, Any]]:
    """A collated batch cut into consecutive batches of ``sizes``: views of its arrays, slices of its lists,
    and for ragged fields a view of the data with offsets starting at 0."""
    bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    out: list[dict[str, Any]] = [{} for _ in sizes]
    for name, value in batch.items():
        for part, lo, hi in zip(out, bounds[:-1], bounds[1:], strict=True):
            if isinstance(value, tuple):  # ragged: (data, offsets)
                data, offsets = value
                start, end = int(offsets[lo]), int(offsets[hi])
                part[name] = (data[start:end], offsets[lo : hi + 1] - start)
            else:
                part[name] = value[lo:hi]
    return out
