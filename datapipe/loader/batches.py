"""What produces a rank's batches: picklable, O(shards) in size, the same in every DataLoader worker."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from datapipe.loader.collate import Decoder, collate
from datapipe.loader.dataset import Dataset
from datapipe.loader.download import Downloader, first_uses
from datapipe.loader.pool import BufferPool
from datapipe.loader.schedule import BatchPlan, EpochOrder


@dataclass(frozen=True)
class BatchSource:
    """Rank ``rank``'s batches of one epoch under ``plan``, read from ``dataset``."""

    dataset: Dataset
    plan: BatchPlan
    rank: int
    seed: int
    epoch: int
    shuffle: bool
    block_shards: int
    decoders: dict[str, Decoder]
    download_ahead: int = 0

    def _shards(self, order: EpochOrder, steps: Iterable[int]) -> Iterator[list[int]]:
        for step in steps:
            shard_ids, _ = order.locate(self.plan.positions(self.rank, step))
            yield list(dict.fromkeys(shard_ids.tolist()))

    def order(self) -> EpochOrder:
        """The epoch's global order (built per process; holds one block's permutation at a time)."""
        return EpochOrder(self.dataset.shard_sizes, self.seed, self.epoch, self.shuffle, self.block_shards)

    def produce(self, steps: Iterable[int], finish: Callable[[dict[str, Any]], Any] | None = None) -> Iterator[Any]:
        """The collated batches of ``steps`` (batch numbers after the plan's start), in order.

        ``finish`` (e.g. ``packing.pack``) turns each batch into what is yielded while its shards are
        still mapped; its batches keep ragged fields as ``collate.Ragged``, gathered by ``finish``.
        """
        order = self.order()
        steps = list(steps)
        downloader = None
        if self.download_ahead and self.dataset.cache is not None:
            downloader = Downloader(self.dataset, first_uses(self._shards(self.order(), steps)),
                                    self.download_ahead)
        opened: set[int] = set()
        pool = BufferPool()
        try:
            for step in steps:
                shard_ids, local = order.locate(self.plan.positions(self.rank, step))
                if downloader is not None:
                    for shard in dict.fromkeys(shard_ids.tolist()):
                        if shard not in opened:
                            opened.add(shard)
                            downloader.consumed()
                keys, columns = self.dataset.read_columns(shard_ids, local, list(self.decoders))
                batch: Any = collate(keys, columns, self.decoders, defer=finish is not None, allocate=pool.allocate)
                if finish is not None:
                    batch = finish(batch)
                del columns
                for shard in set(shard_ids.tolist()):  # resident memory: one batch, not every shard read so far
                    self.dataset.reader(shard).drop_pages()
                yield batch
        finally:
            if downloader is not None:
                downloader.close()
