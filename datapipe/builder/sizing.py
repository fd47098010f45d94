"""Sizing a build's work to its workers' memory: the blocksize, whether encoded samples stay, files
too big."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from datapipe.builder.source.base import Source
from datapipe.builder.source.options import FILE_ROW_FORMATS
from datapipe.errors import BuildError

KEEP_FRACTION = 0.25  # of the workers' memory that encoded samples may take between passes
ENCODED_PER_SOURCE_BYTE = 4  # a guess on the safe side: tar framing and decompressed Parquet
# a 'files' sample is in memory as read, as its encoded payload, and in its partition's block
FILE_COPIES = 3
# Dask starts spilling at 60% of a worker's memory limit, pauses it at 80%, restarts it at 95%
TARGET_FRACTION = 0.6
PAUSE_FRACTION = 0.8  # where Dask pauses a worker: a shard's write must stay below it
SHARD_COPIES = 2  # a shard's bytes in its write task: the pieces that reach it, the writer's
# a worker's memory once it imported the build's stack (pandas, pyarrow, datapipe)
WORKER_BASELINE = 160 << 20
# a partition's peak in a worker per source byte: frame, encoded fields, encoded block, allocator
# slack
PARTITION_EXPANSION = 20
MIN_BLOCKSIZE = 1 << 20


def _all_known(limits: Sequence[int]) -> list[int]:
    """The limits, or [] when a worker has none (0) or there is no worker: nothing to size
    against."""
    known = [m for m in limits if m]
    return known if known and len(known) == len(limits) else []


def check_file_sizes(source: Source, limits: Sequence[int]) -> None:
    """A 'files' source whose largest file cannot be held (FILE_COPIES times) by a worker fails
    before any pass runs, naming the file: each file is one sample, read whole into its worker's
    memory."""
    known = _all_known(limits)
    if source.format not in FILE_ROW_FORMATS or not known:
        return
    biggest = max(source.files, key=lambda f: f.size)
    if FILE_COPIES * biggest.size > min(known):
        raise BuildError(
            f"{biggest.label}: {biggest.size} bytes, one sample read whole into a worker's memory "
            f"({FILE_COPIES}x while it is encoded); a worker has {min(known)} "
            "bytes. Give the workers "
            "more memory (--memory-limit, or fewer --workers) or split the file"
        )


def fitting_blocksize(limits: Sequence[int], stages_bytes: int = 0) -> int | None:
    """The largest blocksize whose partitions a worker of the smallest limit holds while it measures
    or encodes one, well below the level where Dask pauses it; None when a worker has no limit.
    ``stages_bytes``: what the stages hold beside the partition (a tokenizer and its batch)."""
    known = _all_known(limits)
    if not known:
        return None
    room = TARGET_FRACTION * min(known) - WORKER_BASELINE - stages_bytes
    return max(MIN_BLOCKSIZE, int(room // PARTITION_EXPANSION))


def fitted_blocksize(source: Source, limits: Sequence[int], stages_bytes: int = 0) -> int:
    """The configured blocksize, or a smaller one where its partitions would not fit the workers'
    memory (an execution setting: the version is the same at any blocksize); Parquet row groups stay
    whole."""
    fitting = fitting_blocksize(limits, stages_bytes)
    if fitting is None or source.format == "parquet" or fitting >= source.blocksize:
        return source.blocksize
    logging.getLogger("datapipe.builder").info(
        "blocksize %d: partitions a worker of %d bytes can hold", fitting, min(limits)
    )
    return fitting


def fits_in_memory(source: Source, limits: Sequence[int]) -> bool:
    """Whether the encoded dataset (guessed from the source's size) fits in KEEP_FRACTION of the
    workers' memory.

    Larger inputs stream: the write pass reads and cleans each partition again instead.
    """
    if not limits or 0 in limits:  # no limit known: do not guess
        return False
    return ENCODED_PER_SOURCE_BYTE * sum(f.size for f in source.files) <= KEEP_FRACTION * sum(
        limits
    )


@dataclass(frozen=True)
class Fit:
    """How a build's work is sized to its workers: the blocksize and whether encoded samples stay
    between passes."""

    blocksize: int
    keep_encoded: bool


def check_shard_size(shard_bytes: int, limits: Sequence[int], stages_bytes: int = 0) -> None:
    """A build whose shards a worker cannot write fails before any pass runs, naming
    shards.max_bytes: the write pass holds a shard's encoded pieces and its writer's (SHARD_COPIES
    times its bytes), beside the worker's stack and the stages' own memory."""
    known = _all_known(limits)
    if not known:
        return
    need = SHARD_COPIES * shard_bytes + WORKER_BASELINE + stages_bytes
    if need > PAUSE_FRACTION * min(known):
        raise BuildError(
            f"shards.max_bytes: shards of {shard_bytes} bytes are written by one worker, which "
            f"then holds about {need} bytes ({SHARD_COPIES}x the shard, its stack and the "
            f"stages'); a worker has {min(known)} bytes. Give the workers more memory "
            "(--memory-limit, or fewer --workers) or make shards.max_bytes smaller"
        )


def fit_to_workers(
    source: Source, limits: Sequence[int], stages_bytes: int = 0, shard_bytes: int = 0
) -> Fit:
    """The build's sizing for workers of ``limits`` bytes, after checking that every file fits one
    of them and that one can write a shard of ``shard_bytes``; ``stages_bytes``: what the stages
    hold in a worker beside its partition."""
    check_file_sizes(source, limits)
    check_shard_size(shard_bytes, limits, stages_bytes)
    return Fit(fitted_blocksize(source, limits, stages_bytes), fits_in_memory(source, limits))
