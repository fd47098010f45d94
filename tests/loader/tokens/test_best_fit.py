"""Best-fit decreasing, vectorised by size, against the textbook loop item by item."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from datapipe.loader.tokens.best_fit import best_fit, placement
from datapipe.loader.tokens.pack import Pack
from datapipe.loader.tokens.window import WindowDocs, WindowPlan


def textbook(sizes: list[int], capacity: int) -> tuple[list[int], int]:
    """Items by decreasing size (lower index first), each into the fullest bin it fits."""
    room: list[int] = []
    bins = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        fits = [b for b, r in enumerate(room) if r >= sizes[i]]
        if fits:
            b = min(fits, key=lambda b: (room[b], b))
        else:
            room.append(capacity)
            b = len(room) - 1
        room[b] -= sizes[i]
        bins[i] = b
    return bins, len(room)


@given(
    st.integers(1, 40).flatmap(
        lambda cap: st.tuples(st.just(cap), st.lists(st.integers(1, cap), max_size=60))
    )
)
def test_best_fit_places_every_item_as_the_textbook_loop_does(case):
    capacity, sizes = case
    bins, count = best_fit(np.array(sizes, dtype=np.int64), capacity)
    assert (bins.tolist(), count) == textbook(sizes, capacity)
    loads = np.bincount(bins, weights=sizes, minlength=count)
    assert (loads <= capacity).all()


def test_rows_list_a_bins_pieces_largest_first():
    sizes = np.array([3, 5, 2, 5])
    bins, _ = best_fit(sizes, 8)
    order = placement(bins, sizes)
    assert [(int(bins[i]), int(sizes[i])) for i in order] == [(0, 5), (0, 3), (1, 5), (1, 2)]


def test_best_fit_fills_rows_of_long_tailed_documents():
    rng = np.random.default_rng(0)
    length = rng.geometric(1 / 900, 20_000).astype(np.int64)
    docs = WindowDocs(*(np.arange(len(length)),) * 3, length)
    plan = WindowPlan(docs, Pack(4096, "best-fit"))
    assert length.sum() / (plan.rows * 4096) > 0.99


@given(
    st.integers(1, 40).flatmap(
        lambda cap: st.tuples(st.just(cap), st.lists(st.integers(1, cap), max_size=80))
    )
)
def test_counting_bins_by_room_opens_as_many_bins_as_best_fit(case):
    from datapipe.loader.tokens.best_fit import best_fit_count

    capacity, sizes = case
    assert best_fit_count(np.array(sizes, dtype=np.int64), capacity) == textbook(sizes, capacity)[1]
