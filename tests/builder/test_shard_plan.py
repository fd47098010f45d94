"""The shard plan's pure functions, swept with hypothesis: invariants that hold for every input."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from datapipe.builder.shard_plan import (
    CUT_RATE,
    MIN_FILL,
    first_occurrences,
    output_positions,
    shard_boundaries,
    shards_of,
    sizes_in_output_order,
)

sizes_st = st.lists(st.integers(1, 5000), max_size=300)


def _hashes(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**63, size=n, dtype=np.int64).astype(
        np.uint64
    ) * np.uint64(2)


@given(
    sizes_st,
    st.integers(1, 20000),
    st.one_of(st.none(), st.integers(1, 50)),
    st.sampled_from([0, 1024]),
    st.integers(0, 1000),
)
def test_boundaries_cover_every_sample_once_within_limits(sizes, max_bytes, max_samples, end, seed):
    hashes = _hashes(len(sizes), seed)
    bounds = shard_boundaries(np.array(sizes, dtype=np.int64), hashes, max_bytes, max_samples, end)
    assert bounds[0] == 0 and bounds[-1] == len(sizes) and (np.diff(bounds) > 0).all()
    for a, b in zip(bounds[:-1], bounds[1:], strict=False):
        if max_samples is not None:
            assert b - a <= max_samples
        # a shard of several samples fits; a single sample may be larger than the limit
        if b - a > 1:
            assert sum(sizes[a:b]) + end <= max_bytes
        if b == len(sizes):
            continue
        full = sum(sizes[a : b + 1]) + end > max_bytes or (
            max_samples is not None and b - a == max_samples
        )
        share = np.maximum(
            np.array(sizes[a:b]) / max(max_bytes - end, 1), 1 / max_samples if max_samples else 0
        )
        drawn = float(hashes[b - 1] >> np.uint64(11)) / 2**53 < CUT_RATE * share[-1]
        assert full or (drawn and share.sum() >= MIN_FILL)  # a shard ends full, or at a content cut


def test_a_sample_added_or_removed_moves_only_the_cuts_near_it():
    rng = np.random.default_rng(7)
    changed = []
    for trial in range(40):
        n = 3000
        sizes, hashes = rng.integers(500, 1500, size=n), _hashes(n, trial)
        at = int(rng.integers(0, n))
        before = shard_boundaries(sizes, hashes, 20_000, None)
        added = shard_boundaries(
            np.insert(sizes, at, 900), np.insert(hashes, at, np.uint64(12345)), 20_000, None
        )
        removed = shard_boundaries(np.delete(sizes, at), np.delete(hashes, at), 20_000, None)
        for after, shift in ((added, 1), (removed, -1)):
            old = {(int(a), int(b)) for a, b in zip(before[:-1], before[1:], strict=True)}
            new = {
                (int(a) - shift * (a > at), int(b) - shift * (b > at))
                for a, b in zip(after[:-1], after[1:], strict=True)
            }
            changed.append(len(new - old))
    assert len(before) > 50  # ~75 shards: the change touches a couple of them
    assert np.mean(changed) <= 2.5 and max(changed) <= 8


@given(st.lists(st.integers(0, 40), max_size=12), st.one_of(st.none(), st.integers(0, 2**32)))
def test_positions_are_a_permutation_that_ignores_partitioning(counts, seed):
    positions = output_positions(counts, seed)
    flat = np.concatenate(positions) if positions else np.zeros(0, dtype=np.int64)
    assert sorted(flat.tolist()) == list(range(sum(counts)))
    # the same rows cut into other partitions get the same positions
    assert (np.concatenate(output_positions([sum(counts)], seed) or [np.zeros(0)]) == flat).all()
    if seed is None:
        assert (flat == np.arange(sum(counts))).all()


@given(st.lists(st.lists(st.integers(0, 5), max_size=20), max_size=8))
def test_first_occurrences_keep_the_first_row_of_each_value_in_source_order(parts):
    hashes = [np.array([[v, v * 7] for v in p], dtype=np.uint64).reshape(-1, 2) for p in parts]
    masks = first_occurrences(hashes)
    flat_values = [v for p in parts for v in p]
    flat_keep = [bool(k) for m in masks for k in m]
    seen = set()
    for value, keep in zip(flat_values, flat_keep, strict=False):
        assert keep == (value not in seen)
        seen.add(value)
    assert [len(m) for m in masks] == [len(p) for p in parts]


def test_rows_that_share_only_the_first_half_of_a_hash_are_both_kept():
    hashes = [
        np.array([[5, 1], [9, 2]], dtype=np.uint64),
        np.array([[5, 3], [5, 1], [9, 2]], dtype=np.uint64),
    ]
    assert [m.tolist() for m in first_occurrences(hashes)] == [[True, True], [True, False, False]]


def test_sizes_follow_their_samples_into_output_order():
    sizes = [np.array([10, 20]), np.array([30])]
    positions = [np.array([2, 0]), np.array([1])]
    assert sizes_in_output_order(sizes, positions).tolist() == [20, 30, 10]
    assert shards_of(np.array([0, 1, 2, 3]), np.array([0, 2, 4])).tolist() == [0, 0, 1, 1]
