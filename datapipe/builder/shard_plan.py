"""The shard plan, pure functions of sizes and a seed: global order, dedupe masks, shard bounds.

Nothing here depends on how the rows were partitioned: inputs are per-partition arrays that
are only ever concatenated in source order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def first_occurrences(hashes: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per partition, a keep-mask that is True for the first row (in source order) of each hash.

    ``hashes`` holds one (n, 2) uint64 array per partition, in source order. A sort of the first
    halves finds the few rows that share one (most sources have none); only those are compared
    whole.
    """
    counts = [len(h) for h in hashes]
    if not sum(counts):
        return [np.zeros(0, dtype=bool) for _ in hashes]
    flat = np.concatenate([np.asarray(h, dtype=np.uint64).reshape(-1, 2) for h in hashes])
    keep = np.ones(len(flat), dtype=bool)
    values = np.sort(flat[:, 0])  # a value sort is cheaper than an argsort
    if not (values[1:] == values[:-1]).any():
        return np.split(keep, np.cumsum(counts)[:-1])
    # ties in any order: the rows that share a half are put in source order below
    order = np.argsort(flat[:, 0])
    # sorted places equal to the one before
    repeats = np.flatnonzero(flat[order[1:], 0] == flat[order[:-1], 0]) + 1
    if len(repeats):
        rows = np.unique(order[np.concatenate([repeats, repeats - 1])])  # source order
        whole = np.ascontiguousarray(flat[rows]).view(np.dtype((np.void, 16))).ravel()
        _, first = np.unique(whole, return_index=True)
        keep[rows] = False
        keep[rows[first]] = True
    return np.split(keep, np.cumsum(counts)[:-1])


@dataclass(frozen=True)
class Dedupe:
    """The dedupe stages' outcome: per stage, each partition's row hashes and the keep-mask that
    ``first_occurrences`` makes of them; for a near_dedupe stage, its signed documents
    (``removals.Signed``) and its Removal."""

    hashes: Mapping[int, Sequence[Any]] = field(default_factory=dict)
    masks: Mapping[int, Sequence[Any]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the stages want said in the build's summary

    def then(self, stage: int, hashes: Sequence[np.ndarray]) -> Dedupe:
        """This outcome with stage ``stage``'s: its row hashes per partition and their masks."""
        masks = first_occurrences(hashes)
        known = {**self.hashes, stage: list(hashes)}
        return Dedupe(known, {**self.masks, stage: masks}, self.notes)

    def with_removals(
        self,
        stage: int,
        signed: Sequence[Any],
        removals: Sequence[Any],
        notes: Sequence[str] = (),
    ) -> Dedupe:
        """This outcome with near_dedupe stage ``stage``'s: each partition's signed documents, its
        Removal (keep-mask and reasons), and lines for the summary."""
        return Dedupe(
            {**self.hashes, stage: list(signed)},
            {**self.masks, stage: list(removals)},
            (*self.notes, *notes),
        )

    def of(self, part: int, before: int | None = None) -> dict[int, Any]:
        """Partition ``part``'s masks (stage -> keep-mask) of the stages before ``before`` (all
        of them when None)."""
        return {
            stage: masks[part]
            for stage, masks in self.masks.items()
            if before is None or stage < before
        }


def output_positions(counts: Sequence[int], seed: int | None) -> list[np.ndarray]:
    """Per partition, the output position of each of its samples: source order, or a seeded
    permutation."""
    total = int(sum(counts))
    order = np.arange(total, dtype=np.int64)
    if seed is not None:
        order = np.random.Generator(np.random.PCG64(seed)).permutation(total).astype(np.int64)
    return np.split(order, np.cumsum(counts)[:-1]) if counts else []


MIN_FILL = 0.5  # a shard ends at a content cut only once it is at least half full ...
# ... and then after each sample with probability CUT_RATE x the sample's share of a full shard
CUT_RATE = 4.0


def shard_boundaries(
    sizes: np.ndarray,
    hashes: np.ndarray,
    max_bytes: int,
    max_samples: int | None,
    end_size: int = 0,
) -> np.ndarray:
    """Start of every shard and the end: [0, b1, ..., n]. ``sizes`` and ``hashes`` (a 64-bit hash of
    each sample's key) are in output order.

    Cut by content, as restic and borg cut files into chunks: a shard ends after a sample whose hash
    falls under CUT_RATE x its share of a full shard (its bytes over ``max_bytes``, or 1 /
    ``max_samples`` when that is more) once the shard is MIN_FILL full, and before a sample that
    would take it past ``max_bytes`` (with ``end_size``) or ``max_samples``. A cut depends on the
    samples next to it, not on where its shard began, so samples added or removed move only the cuts
    near them (shards average about 3/4 of the limit).
    A sample larger than ``max_bytes`` gets a shard alone.
    """
    n = len(sizes)
    sizes = np.asarray(sizes, dtype=np.int64)
    ends = np.cumsum(sizes)
    share = sizes / max(max_bytes - end_size, 1)
    if max_samples is not None:
        share = np.maximum(share, 1 / max_samples)
    fill = np.cumsum(share)
    draws = (np.asarray(hashes, dtype=np.uint64) >> np.uint64(11)).astype(np.float64) / float(
        1 << 53
    )
    cuts = np.flatnonzero(draws < CUT_RATE * share)  # samples after which a content cut may fall
    bounds = [0]
    start = 0
    while start < n:
        before = int(ends[start - 1]) if start else 0
        stop = max(
            int(np.searchsorted(ends, before + max_bytes - end_size, side="right")), start + 1
        )
        if max_samples is not None:
            stop = min(stop, start + max_samples)
        filled = int(
            np.searchsorted(fill, (fill[start - 1] if start else 0.0) + MIN_FILL, side="left")
        )
        k = int(np.searchsorted(cuts, max(filled, start), side="left"))
        if k < len(cuts) and cuts[k] + 1 < stop:
            stop = int(cuts[k]) + 1
        bounds.append(stop)
        start = stop
    return np.asarray(bounds, dtype=np.int64)


def sizes_in_output_order(
    sizes: Sequence[np.ndarray], positions: Sequence[np.ndarray], dtype: type = np.int64
) -> np.ndarray:
    """Scatter per-partition sample values (sizes, hashes) into one array indexed by output
    position."""
    total = sum(len(s) for s in sizes)
    out = np.zeros(total, dtype=dtype)
    for s, p in zip(sizes, positions, strict=True):
        out[p] = s
    return out


def shards_of(positions: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The shard number of each output position."""
    return np.searchsorted(bounds, positions, side="right") - 1


def split_shard_plan(
    sizes: Sequence[np.ndarray],
    hashes: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    splits: int,
    seed: int | None,
    max_bytes: int,
    max_samples: int | None,
    end_size: int = 0,
) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
    """Each split's samples placed in shards of their own: per partition, each sample's output
    position within its split and its shard number; and the number of shards of each split.

    ``hashes`` holds a 64-bit hash of each sample's key, ``labels`` each sample's split (0 ..
    splits-1), per partition. The shards of split 0 come first, then those of split 1, and so on;
    within a split, order and cuts are those of a dataset of its samples alone
    (``output_positions``, ``shard_boundaries``). All labels 0 with ``splits=1`` is the plan without
    splits.
    """
    positions = [np.zeros(len(s), dtype=np.int64) for s in sizes]
    shards = [np.zeros(len(s), dtype=np.int64) for s in sizes]
    counts: list[int] = []
    first = 0
    for split in range(splits):
        masks = [np.asarray(label) == split for label in labels]
        placed = output_positions([int(m.sum()) for m in masks], seed)
        bounds = shard_boundaries(
            sizes_in_output_order([s[m] for s, m in zip(sizes, masks, strict=True)], placed),
            sizes_in_output_order(
                [h[m] for h, m in zip(hashes, masks, strict=True)], placed, np.uint64
            ),
            max_bytes,
            max_samples,
            end_size,
        )
        for part, (mask, pos) in enumerate(zip(masks, placed, strict=True)):
            positions[part][mask] = pos
            shards[part][mask] = first + shards_of(pos, bounds)
        counts.append(len(bounds) - 1)
        first += len(bounds) - 1
    return positions, shards, counts
