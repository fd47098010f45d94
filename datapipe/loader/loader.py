"""`datapipe.Loader`: batches of a dataset version for one rank, with epochs, a small state and exact resumption."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from datapipe.errors import ConfigError
from datapipe.loader.batches import BatchSource
from datapipe.loader.collate import Decoder, decoders_for
from datapipe.loader.dataset import Dataset, open_dataset
from datapipe.loader.prefetch import prefetch as prefetched
from datapipe.loader.schedule import DEFAULT_BLOCK_SHARDS, BatchPlan, DropLast
from datapipe.loader.world import World, world_from_env

STATE_FORMAT = 1


def _torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def resolve_world(rank: int | None, world_size: int | None, env: Mapping[str, str]) -> World:
    """The rank and world size: as given, else torch.distributed when initialised, else RANK/WORLD_SIZE, else 0/1."""
    if rank is not None and world_size is not None:
        return World(rank, world_size)
    if rank is not None or world_size is not None:
        raise ConfigError("give both rank and world_size, or neither (then they are detected)")
    if "torch.distributed" in sys.modules:
        from datapipe.loader.torch import distributed_world

        detected = distributed_world()
        if detected is not None:
            return World(*detected)
    from_env = world_from_env(env)
    return World(*from_env) if from_env else World()

PREFETCH_BYTES = 64 << 20  # bound on the bytes of batches prepared ahead, per process
WORKER_PREFETCH = 4  # the default batches a DataLoader worker prepares ahead


def default_prefetch(prefetch: int | None, num_workers: int) -> int:
    """``prefetch`` as given; by default 4 per DataLoader worker and none in process.

    In process, batches ahead need a thread, which shares the GIL with the training loop, so it
    overlaps only what the loop does without the GIL. On W1 (``python -m benchmarks.prefetch``,
    processes alternating), neither setting won beyond the VM's noise for a loop that does nothing,
    one that runs Python, or one that sleeps; a thread costs the memory of the batches it holds
    ahead (up to 64 MB). As with torch's DataLoader(num_workers=0), a batch is made when asked.
    """
    if prefetch is not None:
        return prefetch
    return WORKER_PREFETCH if num_workers else 0


class Loader:
    """Iterate batches of a dataset version for this rank; see README "Loading" for the order and guarantees."""

    def __init__(
        self,
        dataset: str | Dataset,
        batch_size: int = 256,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        num_workers: int = 2,
        prefetch: int | None = None,
        drop_last: DropLast = True,
        fields: Sequence[str] | None = None,
        decode: Mapping[str, Decoder] | None = None,
        *,
        block_shards: int = DEFAULT_BLOCK_SHARDS,
        verify: bool = False,
        pin_memory: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        download_ahead: int = 2,
        retries: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
        if drop_last not in (True, "pad"):
            raise ConfigError(f"drop_last={drop_last!r}: use True (drop the last partial global batch) or 'pad' "
                              "(repeat samples to fill it); ranks must get equal batches, so no short batch")
        if num_workers < 0 or (prefetch is not None and prefetch < 0) or block_shards < 1:
            raise ConfigError("num_workers and prefetch must be >= 0, block_shards >= 1")
        if num_workers and not _torch_available():
            raise ConfigError("num_workers > 0 needs torch (pip install 'datapipe[torch]'), or use num_workers=0")
        self.dataset = open_dataset(dataset, storage_options, verify=verify, cache_dir=cache_dir,
                                    cache_limit=cache_limit, retries=retries)
        self.download_ahead = download_ahead
        self.dataset.check_shards()
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.world = resolve_world(rank, world_size, os.environ)
        self.num_workers, self.drop_last = num_workers, drop_last
        self.prefetch = default_prefetch(prefetch, num_workers)
        self.block_shards, self.pin_memory = block_shards, pin_memory
        self.decoders = decoders_for(self.dataset.fields, fields, decode)
        self.epoch = 0
        self.position = 0  # samples all ranks consumed in this epoch

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``; the same epoch as the current one keeps its position (a resumed epoch)."""
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def plan(self) -> BatchPlan:
        """The batches left in the current epoch."""
        return BatchPlan(len(self.dataset), self.batch_size, self.world.world_size, self.drop_last, self.position)

    def __len__(self) -> int:
        """Batches this rank still yields in the current epoch (the same on every rank)."""
        return self.plan().num_batches()

    def prefetch_depth(self) -> int:
        """Batches prepared ahead per process: ``prefetch``, fewer when they would pass PREFETCH_BYTES.

        Every batch in flight holds its own buffer; a new one costs page faults, a reused one does not.
        """
        if not self.prefetch:
            return 0
        batch_bytes = self.dataset.sample_bytes * self.batch_size
        return int(min(self.prefetch, max(1, PREFETCH_BYTES // max(batch_bytes, 1))))

    def _source(self, plan: BatchPlan) -> BatchSource:
        return BatchSource(self.dataset, plan, self.world.rank, self.seed, self.epoch, self.shuffle,
                           self.block_shards, self.decoders, self.download_ahead)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        plan = self.plan()
        n = plan.num_batches()
        source = self._source(plan)
        if _torch_available():
            from datapipe.loader.torch import iterate

            batches = iterate(source, n, self.num_workers, self.prefetch_depth(), self.pin_memory)
        else:
            batches = prefetched(source.produce(range(n)), self.prefetch_depth())
        consumed = 0
        try:
            for batch in batches:
                consumed += 1
                self.position = plan.position_after(consumed)
                yield batch
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
        if consumed == n:  # the epoch is complete: the state now names the next one
            self.epoch, self.position = self.epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        """A small state (no sample lists): enough for a new process to continue with exactly the next batch."""
        return {"format": STATE_FORMAT, "dataset": self.dataset.version, "epoch": self.epoch,
                "position": self.position, "seed": self.seed, "shuffle": self.shuffle,
                "block_shards": self.block_shards, "world_size": self.world.world_size,
                "batch_size": self.batch_size}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``; another world size, worker count or batch size finishes the epoch exactly once."""
        if state.get("format") != STATE_FORMAT:
            raise ConfigError(f"loader state format {state.get('format')!r} is not {STATE_FORMAT}")
        if state["dataset"] != self.dataset.version:
            raise ConfigError(f"the state is for version {state['dataset'][:12]} of the dataset, this loader reads "
                              f"{self.dataset.version[:12]}; open the same version (pin it with NAME@VERSION)")
        for key in ("seed", "shuffle", "block_shards"):
            if state[key] != getattr(self, key):
                raise ConfigError(f"the state was saved with {key}={state[key]!r}, this loader has "
                                  f"{getattr(self, key)!r}; the sample order would differ")
        if not 0 <= int(state["position"]) <= len(self.dataset):
            raise ConfigError(f"state position {state['position']} is outside the dataset ({len(self.dataset)})")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
