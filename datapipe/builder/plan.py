"""The plan pass: where every kept sample goes (``shard_plan``), each shard's file and digest."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from datapipe.builder.config import Pipeline
from datapipe.builder.incremental import shard_digests
from datapipe.builder.measure import Measure
from datapipe.builder.shard_plan import split_shard_plan
from datapipe.builder.splits import split_names
from datapipe.formats.registry import get_format
from datapipe.versioning.store import VersionWriter


@dataclass(frozen=True)
class ShardPlan:
    """Per partition, the output position and shard of each kept sample; per shard, its split,
    its file name and the digest of its samples (``incremental.shard_digests``)."""

    format: str  # the shard format's name
    positions: list[np.ndarray]
    destinations: list[np.ndarray]
    files: list[tuple[str | None, str]]  # per shard: its split and file name
    digests: list[str]


def plan_shards(pipeline: Pipeline, measure: Measure, identities: Sequence[str]) -> ShardPlan:
    """The shard plan of the samples ``measure`` kept, in partitions of ``identities``."""
    shards_cfg, splits = pipeline.shards, pipeline.splits
    fmt = get_format(shards_cfg.format)
    kept = list(zip(measure.reports, measure.key_keep, strict=True))
    sizes = [m.sizes[keep] for m, keep in kept]
    hashes = [m.key_hashes[keep][:, 0] for m, keep in kept]
    if splits is None:
        labels, names = [np.zeros(len(s), dtype=np.int8) for s in sizes], [None]
    else:
        names = split_names(splits.fractions)
        labels = [m.splits[keep] for m, keep in kept]
    positions, destinations, counts = split_shard_plan(
        sizes,
        hashes,
        labels,
        len(names),
        shards_cfg.shuffle_seed,
        shards_cfg.max_bytes,
        shards_cfg.max_samples,
        fmt.writer.end_size,
    )
    files = [
        (name, VersionWriter.shard_filename(i, fmt, name))
        for name, n in zip(names, counts, strict=True)
        for i in range(n)
    ]
    digests = shard_digests(identities, measure.key_keep, positions, destinations, len(files))
    return ShardPlan(fmt.name, positions, destinations, files, digests)
