"""`datapipe.Loader`: batches of a dataset version for one rank, with epochs, a small state and exact resumption."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from datapipe.errors import ConfigError
from datapipe.loader.batches import BatchSource
from datapipe.loader.collate import Decoder
from datapipe.loader.dataset import Dataset, open_dataset
from datapipe.loader.prefetch import prefetch as prefetched
from datapipe.loader.schedule import DEFAULT_BLOCK_SHARDS, BatchPlan, DropLast
from datapipe.loader.settings import LoaderSettings
from datapipe.loader.world import Detect, resolve_world

STATE_FORMAT = 1
PREFETCH_BYTES = 64 << 20  # bound on the bytes of batches prepared ahead, per process


def _torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def _distributed() -> Detect | None:
    """The world detector of torch.distributed, where the program has imported it (else there is no group)."""
    if "torch.distributed" not in sys.modules:
        return None
    from datapipe.loader.torch import distributed_world

    return distributed_world


class Loader:
    """Iterate batches of a dataset version for this rank; see docs/guide/loading.md for the order and guarantees."""

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
        split: str | None = None,
    ) -> None:
        settings = LoaderSettings(batch_size, shuffle, seed, drop_last, block_shards, fields, decode, num_workers,
                                  prefetch, pin_memory, download_ahead)
        if num_workers and not _torch_available():
            raise ConfigError("num_workers > 0 needs torch (pip install 'datapipe[torch]'), or use num_workers=0")
        self.settings = settings
        self.dataset = open_dataset(dataset, storage_options, verify=verify, cache_dir=cache_dir,
                                    cache_limit=cache_limit, retries=retries, split=split)
        self.dataset.check_shards()
        self.world = resolve_world(rank, world_size, os.environ, _distributed())
        self.epoch = 0
        self.position = 0  # samples all ranks consumed in this epoch
        self.batch_source()  # an unknown field or decoder fails here, not at the first batch

    def __getattr__(self, name: str) -> Any:
        """The settings read as attributes (``loader.batch_size``, ``loader.prefetch``)."""
        settings = self.__dict__.get("settings")
        if settings is not None and name in LoaderSettings.__dataclass_fields__:
            return getattr(settings, name)
        raise AttributeError(f"'Loader' object has no attribute {name!r}")

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``; the same epoch as the current one keeps its position (a resumed epoch)."""
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def batch_source(self) -> BatchSource:
        """What makes this rank's batches of the current epoch from the current position (picklable)."""
        return BatchSource(self.dataset, self.settings, self.world, self.epoch, self.position)

    def plan(self) -> BatchPlan:
        """The batches left in the current epoch."""
        return self.batch_source().plan

    def __len__(self) -> int:
        """Batches this rank still yields in the current epoch (the same on every rank)."""
        return self.plan().num_batches()

    def prefetch_depth(self) -> int:
        """Batches prepared ahead per process: ``prefetch``, fewer when they would pass PREFETCH_BYTES.

        Every batch in flight holds its own buffer; a new one costs page faults, a reused one does not.
        """
        settings = self.settings
        if not settings.prefetch:
            return 0
        batch_bytes = self.dataset.sample_bytes * settings.batch_size
        return int(min(settings.prefetch, max(1, PREFETCH_BYTES // max(batch_bytes, 1))))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        source = self.batch_source()
        plan, settings = source.plan, self.settings
        n = plan.num_batches()
        if _torch_available():
            from datapipe.loader.torch import iterate

            batches = iterate(source, n, settings.num_workers, self.prefetch_depth(), settings.pin_memory)
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
                "position": self.position, "seed": self.settings.seed, "shuffle": self.settings.shuffle,
                "block_shards": self.settings.block_shards, "world_size": self.world.world_size,
                "batch_size": self.settings.batch_size, "split": self.dataset.split}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``; another world size, worker count or batch size finishes the epoch exactly once."""
        if state.get("format") != STATE_FORMAT:
            raise ConfigError(f"loader state format {state.get('format')!r} is not {STATE_FORMAT}")
        if state["dataset"] != self.dataset.version:
            raise ConfigError(f"the state is for version {state['dataset'][:12]} of the dataset, this loader reads "
                              f"{self.dataset.version[:12]}; open the same version (pin it with NAME@VERSION)")
        if state.get("split") != self.dataset.split:  # (states saved before splits have none: the whole version)
            raise ConfigError(f"the state is for split {state.get('split')!r} of the dataset, this loader reads split "
                              f"{self.dataset.split!r}; open the same split (split=...)")
        for key in ("seed", "shuffle", "block_shards"):
            if state[key] != getattr(self.settings, key):
                raise ConfigError(f"the state was saved with {key}={state[key]!r}, this loader has "
                                  f"{getattr(self.settings, key)!r}; the sample order would differ")
        if not 0 <= int(state["position"]) <= len(self.dataset):
            raise ConfigError(f"state position {state['position']} is outside the dataset ({len(self.dataset)})")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
