"""`datapipe.Loader`: batches of a dataset version for one rank, with epochs, a small state and
exact resumption."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from datapipe.errors import ConfigError
from datapipe.loader.batches import BatchSource
from datapipe.loader.collate import Decoder
from datapipe.loader.dataset import Dataset
from datapipe.loader.images.spec import ImageSpec
from datapipe.loader.ledger import batch_keys
from datapipe.loader.mix import Mix
from datapipe.loader.opening import open_checked
from datapipe.loader.prefetch import prefetch as prefetched
from datapipe.loader.run_state import STATE_FORMAT, RunState
from datapipe.loader.schedule import DEFAULT_BLOCK_SHARDS, BatchPlan, DropLast
from datapipe.loader.settings import LoaderSettings
from datapipe.loader.shard_set import ShardSet
from datapipe.loader.timeline import Skips
from datapipe.loader.tokens.pack import Pack
from datapipe.loader.world import Detect, World, resolve_world
from datapipe.versioning.leases import DEFAULT_TTL

__all__ = ["STATE_FORMAT", "Loader"]
PREFETCH_BYTES = 64 << 20  # bound on the bytes of batches prepared ahead, per process


def _torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def gpu_images(source: BatchSource) -> dict[str, ImageSpec]:
    """The image fields of ``source`` decoded on the GPU (datapipe.image(device="cuda")), checked
    for a device."""
    gpu = {
        name: d
        for name, d in source.decoders.items()
        if isinstance(d, ImageSpec) and d.device == "cuda"
    }
    if gpu:
        if not _torch_available():
            raise ConfigError(
                "datapipe.image(device='cuda') needs torch with CUDA; install torch, "
                "or use device='cpu'"
            )
        from datapipe.loader.torch.images import check_devices

        check_devices(gpu)
    return gpu


def _distributed() -> Detect | None:
    """The world detector of torch.distributed, where the program has imported it (else there is no
    group)."""
    if "torch.distributed" not in sys.modules:
        return None
    from datapipe.loader.torch import distributed_world

    return distributed_world


def _check_torch_for_workers(num_workers: int) -> None:
    """DataLoader workers are torch's: without torch only num_workers=0 can run."""
    if num_workers and not _torch_available():
        raise ConfigError(
            "num_workers > 0 needs torch: pip install torch (the CPU wheel for a machine "
            "without a GPU: docs/guide/loading.md#installing-torch), or use num_workers=0"
        )


class Loader:
    """Iterate batches of a dataset version (or a mix) for this rank; docs/guide/loading.md has the
    order and guarantees, docs/guide/training-runs.md the mix, the step ledger and skips."""

    def __init__(
        self,
        dataset: str | os.PathLike[str] | Dataset | Mix,
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
        pack: Pack | None = None,
        block_shards: int = DEFAULT_BLOCK_SHARDS,
        skip_steps: Sequence[tuple[int, int]] = (),
        verify: bool = False,
        pin_memory: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        download_ahead: int = 2,
        retries: int | None = None,
        split: str | None = None,
        lease_ttl: float | None = DEFAULT_TTL,
    ) -> None:
        settings = LoaderSettings(
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            block_shards=block_shards,
            fields=fields,
            decode=decode,
            num_workers=num_workers,
            prefetch=prefetch,
            pin_memory=pin_memory,
            download_ahead=download_ahead,
        )
        _check_torch_for_workers(num_workers)
        self.settings = settings
        # what it opened from a URL or a mix file it closes (and so releases their leases); a
        # Dataset or Mix given is the caller's
        data, self._owns_data = open_checked(
            dataset,
            storage_options,
            split,
            (pack, seed, shuffle, block_shards),
            verify=verify,
            cache_dir=cache_dir,
            cache_limit=cache_limit,
            retries=retries,
            lease_ttl=lease_ttl,
        )
        world = resolve_world(rank, world_size, os.environ, _distributed())
        self.run = RunState(data, settings, world, Skips.of(skip_steps))
        # an unknown field or decoder, or no device, fails here, not at the first batch
        gpu_images(self.batch_source())

    @property
    def batch_size(self) -> int:
        """Samples per rank and batch."""
        return self.settings.batch_size

    @property
    def shuffle(self) -> bool:
        """Whether the epochs are shuffled (else storage order)."""
        return self.settings.shuffle

    @property
    def seed(self) -> int:
        """The seed of the epochs' orders."""
        return self.settings.seed

    @property
    def drop_last(self) -> DropLast:
        """True: the last partial global batch of an epoch is dropped; 'pad': filled."""
        return self.settings.drop_last

    @property
    def pack(self) -> Pack | None:
        """How token documents are packed into rows (None: batches of samples)."""
        return getattr(self.run.data, "pack", None)

    @property
    def block_shards(self) -> int:
        """Consecutive shards of the order whose samples are shuffled together."""
        return self.settings.block_shards

    @property
    def fields(self) -> Sequence[str] | None:
        """The fields a batch holds (None: every field)."""
        return self.settings.fields

    @property
    def decode(self) -> Mapping[str, Decoder] | None:
        """Field -> decoder asked for (the rest by their kind)."""
        return self.settings.decode

    @property
    def num_workers(self) -> int:
        """DataLoader worker processes (0: batches are made in this process)."""
        return self.settings.num_workers

    @property
    def prefetch(self) -> int:
        """Batches prepared ahead per worker (or in process): the default settled."""
        return self.settings.prefetch

    @property
    def pin_memory(self) -> bool:
        """Whether batches are gathered into page-locked memory (with a CUDA device)."""
        return self.settings.pin_memory

    @property
    def download_ahead(self) -> int:
        """Remote shards downloaded ahead of the ones being read."""
        return self.settings.download_ahead

    @property
    def dataset(self) -> ShardSet:
        """What the loader reads: a Dataset, or a Mix."""
        return self.run.data

    @property
    def world(self) -> World:
        """This rank's world."""
        return self.run.world

    @property
    def epoch(self) -> int:
        """The current epoch."""
        return self.run.epoch

    @property
    def position(self) -> int:
        """Samples all ranks consumed in the current epoch."""
        return self.run.position

    @property
    def step(self) -> int:
        """The global step of the next batch (counted from step 0 of epoch 0, across epochs)."""
        return self.run.step

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``; the same epoch as the current one keeps its position (a resumed
        epoch)."""
        self.run.set_epoch(epoch)

    def skip_steps(self, start: int, end: int) -> None:
        """No rank delivers global steps [start, end) (end excluded), nor reads their payloads;
        every other step delivers the batch it would have. Call it on every rank (the skips travel
        in ``state_dict``)."""
        self.run.skip(start, end)

    def batch_keys(self, step: int, rank: int | None = None) -> list[Any]:
        """The (source, key) pairs global step ``step`` delivers: to ``rank``, or to every rank in
        rank order; with ``pack=``, each row's pieces (source, key, first token, end token).

        No payload or token is read (keys come from the shard indexes). A skipped step delivers
        none: [].
        """
        if step in self.run.skips:
            return []
        world = self.run.world.world_size
        if rank is not None and not 0 <= rank < world:
            raise ConfigError(f"rank {rank} is not within a world of {world}")
        ranks = range(world) if rank is None else range(rank, rank + 1)
        return batch_keys(self.run.data, self.settings, self.run.timeline, step, ranks)

    def batch_source(self) -> BatchSource:
        """What makes this rank's batches of the current epoch from the current position
        (picklable)."""
        return self.run.batch_source()

    def plan(self) -> BatchPlan:
        """The batches left in the current epoch (skipped steps included)."""
        return self.run.plan()

    def __len__(self) -> int:
        """Batches this rank still yields in the current epoch (the same on every rank; skips left
        out)."""
        return len(self.batch_source().delivered())

    def prefetch_depth(self) -> int:
        """Batches prepared ahead per process: ``prefetch``, fewer when they would pass
        PREFETCH_BYTES.

        Every batch in flight holds its own buffer; a new one costs page faults, a reused one does
        not.
        """
        settings = self.settings
        if not settings.prefetch:
            return 0
        batch_bytes = self.dataset.sample_bytes * settings.batch_size
        return int(min(settings.prefetch, max(1, PREFETCH_BYTES // max(batch_bytes, 1))))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        source = self.batch_source()
        plan, settings = source.plan, self.settings
        steps = source.delivered()
        n = len(steps)
        if _torch_available():
            from datapipe.loader.torch import iterate

            workers, depth = settings.num_workers, self.prefetch_depth()
            batches = iterate(source, workers, depth, settings.pin_memory)
        else:
            batches = prefetched(source.produce(steps), self.prefetch_depth())
        gpu = gpu_images(source)
        if gpu:  # decoded here, in the training process, where the device is
            from datapipe.loader.torch.images import on_gpu
        consumed = 0
        try:
            for batch in batches:
                if gpu:
                    batch = on_gpu(batch, gpu)
                self.run.consumed(plan, int(steps[consumed]))
                consumed += 1
                yield batch
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
        if consumed == n:  # the epoch is complete: the state now names the next one
            self.run.next_epoch()

    def close(self) -> None:
        """Release the shards this loader opened and the lease on their versions (gc may then delete
        them)."""
        if self.__dict__.get("_owns_data"):
            self.run.data.close()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def state_dict(self) -> dict[str, Any]:
        """A small state (no sample lists): enough for a new process to continue with exactly the
        next batch."""
        return self.run.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``; another world size, worker count or batch size finishes the
        epoch exactly once, and a mix with other weights continues each source from its cursor."""
        self.run.load_state_dict(state)
        self.batch_source()
