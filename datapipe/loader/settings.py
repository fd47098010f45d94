"""The loader's settings: one frozen value, validated once, shared by the Loader and
ShardDataset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from datapipe.errors import ConfigError
from datapipe.loader.collate import Decoder
from datapipe.loader.schedule import DEFAULT_BLOCK_SHARDS, DropLast

WORKER_PREFETCH = 4  # the default batches a DataLoader worker prepares ahead


@dataclass(frozen=True, kw_only=True)
class LoaderSettings:
    """How a rank's batches are made and delivered: the ``datapipe.Loader`` keywords that are not
    about opening the dataset or the world.

    ``fields`` and ``decode`` are checked against a dataset's fields where a BatchSource is made.
    ``prefetch=None`` becomes the default: ``WORKER_PREFETCH`` per DataLoader worker, none in
    process (there a batch is made when asked, as with torch's DataLoader(num_workers=0): a thread
    ahead would share the GIL with the training loop and hold its batches' memory).
    """

    batch_size: int = 256
    shuffle: bool = True
    seed: int = 0
    drop_last: DropLast = True
    block_shards: int = DEFAULT_BLOCK_SHARDS
    fields: Sequence[str] | None = None
    decode: Mapping[str, Decoder] | None = None
    num_workers: int = 0
    prefetch: int | None = None
    pin_memory: bool = False
    download_ahead: int = 2

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.drop_last not in (True, "pad"):
            raise ConfigError(
                f"drop_last={self.drop_last!r}: use True (drop the last partial global batch) or "
                "'pad' (repeat samples to fill it); ranks must get equal batches, so no short batch"
            )
        if (
            self.num_workers < 0
            or (self.prefetch is not None and self.prefetch < 0)
            or self.block_shards < 1
        ):
            raise ConfigError("num_workers and prefetch must be >= 0, block_shards >= 1")
        if self.prefetch is None:  # a frozen value: its default is settled here, once
            object.__setattr__(self, "prefetch", WORKER_PREFETCH if self.num_workers else 0)
