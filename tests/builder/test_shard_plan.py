"""The shard plan's pure functions, swept with hypothesis: invariants that hold for every input."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from datapipe.builder.shard_plan import (
    first_occurrences,
    output_positions,
    shard_boundaries,
    shards_of,
    sizes_in_output_order,
)

sizes_st = st.lists(st.integers(1, 5000), max_size=300)


@given(sizes_st, st.integers(1, 20000), st.one_of(st.none(), st.integers(1, 50)), st.sampled_from([0, 1024]))
def test_boundaries_cover_every_sample_once_within_limits(sizes, max_bytes, max_samples, end):
    bounds = shard_boundaries(np.array(sizes, dtype=np.int64), max_bytes, max_samples, end)
    assert bounds[0] == 0 and bounds[-1] == len(sizes) and (np.diff(bounds) > 0).all()
    for a, b in zip(bounds[:-1], bounds[1:], strict=False):
        if max_samples is not None:
            assert b - a <= max_samples
        if b - a > 1:  # a shard of several samples fits; a single sample may be larger than the limit
            assert sum(sizes[a:b]) + end <= max_bytes
        if b < len(sizes) and (max_samples is None or b - a < max_samples):
            assert sum(sizes[a : b + 1]) + end > max_bytes  # greedy: the next sample would not have fit


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


def test_sizes_follow_their_samples_into_output_order():
    sizes = [np.array([10, 20]), np.array([30])]
    positions = [np.array([2, 0]), np.array([1])]
    assert sizes_in_output_order(sizes, positions).tolist() == [20, 30, 10]
    assert shards_of(np.array([0, 1, 2, 3]), np.array([0, 2, 4])).tolist() == [0, 0, 1, 1]
