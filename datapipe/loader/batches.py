"""What produces a rank's batches: picklable, O(shards) in size, the same in every DataLoader
worker."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from datapipe.errors import ConfigError
from datapipe.loader.cache_pins import DROP_BYTES, CachePins
from datapipe.loader.collate import Decoder, collate, decoders_for
from datapipe.loader.download import first_uses
from datapipe.loader.images.spec import ImageSpec
from datapipe.loader.pool import BufferPool
from datapipe.loader.schedule import BatchPlan
from datapipe.loader.settings import LoaderSettings
from datapipe.loader.shard_set import Order, ShardSet
from datapipe.loader.world import World

SOURCE = "__source__"  # the batch field that names each sample's source, in a mix
CHUNK_BYTES = 8 << 20  # small batches are read and collated this many stored bytes at a time ...
CHUNK_BATCHES = 8  # ... but at most this many batches at once
# packed rows: pieces found for this many batches at once, each batch assembled as it is taken
PACKED_CHUNK_BATCHES = 32


@dataclass(frozen=True)
class BatchSource:
    """Rank ``world.rank``'s batches of epoch ``epoch`` under ``settings``, read from ``dataset`` (a
    Dataset or a Mix), starting at epoch position ``position`` (the samples all ranks consumed of
    the epoch so far).

    ``steps``: the plan's batch steps to deliver, ascending (None: all; skipped steps are left out).
    """

    dataset: ShardSet
    settings: LoaderSettings
    world: World
    epoch: int = 0
    position: int = 0
    steps: np.ndarray | None = None
    decoders: dict[str, Decoder] = field(init=False, repr=False)

    # the fields and decoders asked for, checked against the dataset's now
    def __post_init__(self) -> None:
        self.dataset.check_fields(self.settings.fields, self.settings.decode)
        if self.packed:  # rows of token pieces: nothing to decode
            tokens = self.settings.batch_size * self.pack.length
            if tokens >= 1 << 31:  # cu_seqlens is FlashAttention's int32
                raise ConfigError(
                    f"batch_size x pack length is {tokens} tokens a batch, past the int32 offsets "
                    "of cu_seqlens (2^31); give a smaller batch_size or length"
                )
            object.__setattr__(self, "decoders", {})
            return
        decoders = decoders_for(self.dataset.fields, self.settings.fields, self.settings.decode)
        # augmentation
        decoders = {
            name: d.at(self.settings.seed, self.epoch) if isinstance(d, ImageSpec) else d
            for name, d in decoders.items()
        }
        object.__setattr__(self, "decoders", decoders)

    @property
    def pack(self) -> Any:
        """The Pack its rows are made by (``pack=``); None for samples."""
        return getattr(self.dataset, "pack", None)

    @property
    def packed(self) -> bool:
        """Whether the dataset is read as packed rows of tokens (``pack=``)."""
        return self.pack is not None

    @cached_property
    def plan(self) -> BatchPlan:
        """Which epoch positions each of the world's batch steps holds, from ``position`` on."""
        settings = self.settings
        return BatchPlan(
            len(self.dataset),
            settings.batch_size,
            self.world.world_size,
            settings.drop_last,
            self.position,
        )

    def delivered(self) -> range | np.ndarray:
        """The plan's steps this source's consumers deliver, in order (a worker takes every n-th of
        them)."""
        return range(self.plan.num_batches()) if self.steps is None else self.steps

    def _shards(self, order: Order, steps: Iterable[int]) -> Iterator[list[int]]:
        for step in steps:
            shard_ids, _ = order.locate(self.plan.positions(self.world.rank, step))
            yield list(dict.fromkeys(shard_ids.tolist()))

    def order(self) -> Order:
        """The epoch's global order (built per process; holds one block's permutation at a time)."""
        settings = self.settings
        return self.dataset.order(
            settings.seed, self.epoch, settings.shuffle, settings.block_shards
        )

    def chunk_batches(self, defer: Collection[str]) -> int:
        """How many consecutive steps to read and collate as one: much of a small batch's cost is
        per batch, not per sample. Only where that changes nothing a user sees: batches come out the
        same, no decoder of theirs runs ahead, and a remote dataset's cache holds the shards of one
        batch in use, not of several."""
        if (
            (defer and not self.packed)  # packed rows have no field to defer
            or self.dataset.files.remote
            or any(
                callable(d) or d == "image" or isinstance(d, ImageSpec)
                for d in self.decoders.values()
            )
        ):
            return 1
        batch_bytes = self.dataset.sample_bytes * self.plan.batch_size
        most = CHUNK_BATCHES
        if self.packed:  # the chunk's cu_seqlens stay int32 too
            most = min(
                PACKED_CHUNK_BATCHES,
                ((1 << 31) - 1) // (self.plan.batch_size * self.pack.length),
            )
        return int(max(1, min(most, CHUNK_BYTES // max(batch_bytes, 1))))

    def produce(
        self,
        steps: Iterable[int],
        finish: Callable[[dict[str, Any]], Any] | None = None,
        defer: Collection[str] = (),
    ) -> Iterator[Any]:
        """The collated batches of ``steps`` (batch numbers after the plan's start), in order.

        ``finish`` turns each batch into what is yielded (tensors, say), in this thread and while
        its shards are still mapped; fields whose decoder is in ``defer`` ("ragged", "bytes", ...)
        stay ``collate.Ragged`` for ``finish`` (``batch_buffers.pack``) to gather straight into its
        buffer. Small batches are read and collated a few at a time (``chunk_batches``), then cut
        apart.

        The shards read are pinned by ``CachePins`` (loader/cache_pins.py). A remote (cached) shard
        goes back as soon as no later step of ``steps`` reads it (steps ascend, so positions do: a
        shard is done once the next step starts past ``done_at``), which lets the cache evict it
        mid-epoch: the cache holds the shards in use plus ``download_ahead``.
        """
        if not isinstance(steps, range):
            # read twice (the downloader's order, then the batches); a range stays O(1)
            steps = list(steps)
        order, plan, rank = self.order(), self.plan, self.world.rank
        pins = self._pins(order, steps)
        pool = BufferPool()
        chunk = self.chunk_batches(defer)
        try:
            for chunk_steps, following in _chunks(steps, chunk):
                batches, shard_ids = self._read(order, chunk_steps, chunk, pins, pool, defer)
                until = None
                if following is not None and pins.releases:
                    until = int(plan.positions(rank, following).min())
                if self.packed:  # each batch assembled as it is taken, its shards still open
                    for batch in batches:
                        yield batch if finish is None else finish(batch)
                    pins.read(shard_ids, until)
                    continue
                if finish is not None:
                    batches = [finish(batch) for batch in batches]
                pins.read(shard_ids, until)
                while batches:
                    yield batches.pop(0)
        finally:
            pins.close()

    def _pins(self, order: Order, steps: Iterable[int]) -> CachePins:
        """What pins the shards ``steps`` read; for a remote dataset, also what downloads them ahead
        and gives each back to the cache once ``order`` is past it."""
        files, sample_bytes = self.dataset.files, self.dataset.sample_bytes
        drop = DROP_BYTES
        if self.packed:  # rows are read all over a window: its pages stay until a window's worth
            sources = getattr(self.dataset, "datasets", (self.dataset,))  # of each source, in a mix
            drop = max(drop, sum(rows.window_bytes for rows in sources))
        if not files.remote:
            return CachePins(files, sample_bytes, drop_bytes=drop)
        # the downloader's thread walks an order of its own (an order caches the block it is in)
        upcoming = first_uses(self._shards(self.order(), steps))
        ahead = self.settings.download_ahead
        return CachePins(files, sample_bytes, order.done_at(), upcoming, ahead, drop)

    def _read(
        self,
        order: Order,
        steps: list[int],
        chunk: int,
        pins: CachePins,
        pool: BufferPool,
        defer: Collection[str],
    ) -> tuple[Iterable[dict[str, Any]], np.ndarray]:
        """The collated batches of ``steps`` (read as one when ``chunk`` > 1, then cut apart; packed
        rows assembled as they are taken), and the shards they read."""
        positions = [self.plan.positions(self.world.rank, step) for step in steps]
        shard_ids, local = order.locate(positions[0] if chunk == 1 else np.concatenate(positions))
        sizes = [len(p) for p in positions]
        if self.packed:
            rows = self.dataset.files.read_rows(shard_ids, local, sizes)  # pieces found now
            pins.opened(shard_ids)
            return _with_sources(rows, self.dataset.source_names(shard_ids), sizes), shard_ids
        keys, columns = self.dataset.files.read_columns(shard_ids, local, list(self.decoders))
        pins.opened(shard_ids)
        collated = collate(keys, columns, self.decoders, defer=defer, allocate=pool.allocate)
        self._add_sources(collated, shard_ids)
        del columns
        return ([collated] if chunk == 1 else cut(collated, sizes)), shard_ids

    def _add_sources(self, batch: dict[str, Any], shard_ids: np.ndarray) -> None:
        """In a mix, the source name of each sample (or row) as ``__source__``."""
        names = self.dataset.source_names(shard_ids)
        if names is not None:
            batch[SOURCE] = names


def _with_sources(
    batches: Iterator[dict[str, Any]], names: list[str] | None, sizes: list[int]
) -> Iterator[dict[str, Any]]:
    """Packed batches, each with its rows' source names (``names``, in a mix) as ``__source__``."""
    if names is None:
        yield from batches
        return
    bounds = np.cumsum([0, *sizes]).tolist()
    for batch, lo, hi in zip(batches, bounds[:-1], bounds[1:], strict=True):
        batch[SOURCE] = names[lo:hi]
        yield batch


def _chunks(steps: Iterable[int], size: int) -> Iterator[tuple[list[int], int | None]]:
    """Consecutive runs of up to ``size`` steps, each with the step that follows it (None after the
    last)."""
    upcoming = iter(steps)
    following = next(upcoming, None)
    while following is not None:
        run = [following]
        following = next(upcoming, None)
        while following is not None and len(run) < size:
            run.append(following)
            following = next(upcoming, None)
        yield run, following


def cut(batch: dict[str, Any], sizes: list[int]) -> list[dict[str, Any]]:
    """A collated batch cut into consecutive batches of ``sizes``: views of its arrays, slices of
    its lists, and for ragged fields a view of the data with offsets starting at 0."""
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
