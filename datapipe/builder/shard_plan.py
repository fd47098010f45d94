"""The shard plan, as pure functions of sizes and a seed: global order, dedupe masks, shard boundaries.

Nothing here depends on how the rows were partitioned: inputs are per-partition arrays that
are only ever concatenated in source order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def first_occurrences(hashes: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per partition, a keep-mask that is True for the first row (in source order) of each hash.

    ``hashes`` holds one (n, 2) uint64 array per partition, in source order.
    """
    counts = [len(h) for h in hashes]
    if not sum(counts):
        return [np.zeros(0, dtype=bool) for _ in hashes]
    flat = np.concatenate([np.asarray(h, dtype=np.uint64).reshape(-1, 2) for h in hashes])
    rows = np.ascontiguousarray(flat).view(np.dtype((np.void, 16))).ravel()
    _, first = np.unique(rows, return_index=True)
    keep = np.zeros(len(rows), dtype=bool)
    keep[first] = True
    return np.split(keep, np.cumsum(counts)[:-1])


def output_positions(counts: Sequence[int], seed: int | None) -> list[np.ndarray]:
    """Per partition, the output position of each of its samples: source order, or a seeded permutation."""
    total = int(sum(counts))
    order = np.arange(total, dtype=np.int64)
    if seed is not None:
        order = np.random.Generator(np.random.PCG64(seed)).permutation(total).astype(np.int64)
    return np.split(order, np.cumsum(counts)[:-1]) if counts else []


def shard_boundaries(sizes: np.ndarray, max_bytes: int, max_samples: int | None, end_size: int = 0) -> np.ndarray:
    """Start of every shard and the end: [0, b1, ..., n]. ``sizes`` are in output order.

    Greedy: a shard takes samples while its bytes (plus ``end_size``) stay within ``max_bytes``
    and its count within ``max_samples``; a sample larger than ``max_bytes`` gets a shard alone.
    """
    n = len(sizes)
    ends = np.cumsum(np.asarray(sizes, dtype=np.int64))
    bounds = [0]
    start = 0
    while start < n:
        before = int(ends[start - 1]) if start else 0
        stop = int(np.searchsorted(ends, before + max_bytes - end_size, side="right"))
        stop = max(stop, start + 1)
        if max_samples is not None:
            stop = min(stop, start + max_samples)
        bounds.append(stop)
        start = stop
    return np.asarray(bounds, dtype=np.int64)


def sizes_in_output_order(sizes: Sequence[np.ndarray], positions: Sequence[np.ndarray]) -> np.ndarray:
    """Scatter per-partition sample sizes into one array indexed by output position."""
    total = sum(len(s) for s in sizes)
    out = np.zeros(total, dtype=np.int64)
    for s, p in zip(sizes, positions, strict=True):
        out[p] = s
    return out


def shards_of(positions: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The shard number of each output position."""
    return np.searchsorted(bounds, positions, side="right") - 1


def split_shard_plan(sizes: Sequence[np.ndarray], labels: Sequence[np.ndarray], splits: int, seed: int | None,
                     max_bytes: int, max_samples: int | None, end_size: int = 0
                     ) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
    """Each split's samples placed in shards of their own: per partition, each sample's output position
    within its split and its shard number; and the number of shards of each split.

    ``labels`` holds each sample's split (0 .. splits-1) per partition. The shards of split 0 come first,
    then those of split 1, and so on; within a split, order and cuts are those of a dataset of its samples
    alone (``output_positions``, ``shard_boundaries``). All labels 0 with ``splits=1`` is the plan without
    splits.
    """
    positions = [np.zeros(len(s), dtype=np.int64) for s in sizes]
    shards = [np.zeros(len(s), dtype=np.int64) for s in sizes]
    counts: list[int] = []
    first = 0
    for split in range(splits):
        masks = [np.asarray(label) == split for label in labels]
        placed = output_positions([int(m.sum()) for m in masks], seed)
        bounds = shard_boundaries(sizes_in_output_order([s[m] for s, m in zip(sizes, masks, strict=True)], placed),
                                  max_bytes, max_samples, end_size)
        for part, (mask, pos) in enumerate(zip(masks, placed, strict=True)):
            positions[part][mask] = pos
            shards[part][mask] = first + shards_of(pos, bounds)
        counts.append(len(bounds) - 1)
        first += len(bounds) - 1
    return positions, shards, counts
