"""Best-fit decreasing bin packing, vectorised by item size.

Items go in decreasing size (ties: lower index first); each into the open bin with the least room
that still fits it (ties: the bin opened first), else into a new bin. Items of one size fill the
bins that fit them in order of their room: a bin that takes one keeps the least room that fits
the next, so it takes as many as fit before the next bin takes any. That makes each size one
cumulative sum over the open bins, and the loop runs once per distinct size (at most the
capacity), never per item.
"""

from __future__ import annotations

import numpy as np


def best_fit(sizes: np.ndarray, capacity: int) -> tuple[np.ndarray, int]:
    """(the bin of each item, the number of bins) for items of ``sizes`` (each 1..capacity)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    n = len(sizes)
    if n and (int(sizes.min()) < 1 or int(sizes.max()) > capacity):
        raise ValueError(f"item sizes must be within 1..{capacity}")
    if n == 0:
        return np.empty(0, dtype=np.int64), 0
    order = np.argsort(-sizes, kind="stable")
    ordered = sizes[order]
    bins_sorted = np.empty(n, dtype=np.int64)  # the bin of each item, in placement order
    stride = n + 1  # a bin's key: room * stride + bin id, so one sort orders by (room, id)
    keys = np.empty(0, dtype=np.int64)  # open bins with room left, ascending
    opened = 0
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], n].astype(np.int64)
    for first, end in zip(starts.tolist(), ends.tolist(), strict=True):
        size, count = int(ordered[first]), end - first
        lo = int(np.searchsorted(keys, size * stride))
        room, ids = keys[lo:] // stride, keys[lo:] % stride
        takes = room // size
        filled = np.cumsum(takes)
        if len(filled) and int(filled[-1]) >= count:  # the open bins take them all
            used = int(np.searchsorted(filled, count)) + 1
            takes = takes[:used].copy()
            takes[-1] -= int(filled[used - 1]) - count
            ids, room = ids[:used], room[:used]
        else:  # every open bin that fits is filled, the rest go to new bins
            used = len(takes)
            rest, each = count - (int(filled[-1]) if used else 0), capacity // size
            new = -(-rest // each)
            new_takes = np.full(new, each, dtype=np.int64)
            new_takes[-1] = rest - each * (new - 1)
            ids = np.concatenate([ids, np.arange(opened, opened + new)])
            room = np.concatenate([room, np.full(new, capacity)])
            takes = np.concatenate([takes, new_takes])
            opened += new
        bins_sorted[first:end] = np.repeat(ids, takes)
        left = room - takes * size
        kept = np.concatenate([keys[:lo], keys[lo + used :]])
        moved = np.sort(left[left > 0] * stride + ids[left > 0])
        keys = np.insert(kept, np.searchsorted(kept, moved), moved)
    bins = np.empty(n, dtype=np.int64)
    bins[order] = bins_sorted
    return bins, opened


def placement(bins: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The items in row order: by bin, and within a bin in the order they were placed (larger
    first)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    return np.lexsort((np.arange(len(bins)), -sizes, bins))


def best_fit_count(sizes: np.ndarray, capacity: int) -> int:
    """The number of bins ``best_fit`` opens for items of ``sizes`` (see ``bins_for``)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if len(sizes) and (int(sizes.min()) < 1 or int(sizes.max()) > capacity):
        raise ValueError(f"item sizes must be within 1..{capacity}")
    return bins_for(np.bincount(sizes, minlength=capacity + 1), capacity)


def bins_for(by_size: np.ndarray, capacity: int) -> int:
    """The number of bins ``best_fit`` opens for ``by_size[s]`` items of each size s, from the
    count of bins at each room alone (no bin is told apart): a few numpy calls over the rooms in
    use a distinct size, whatever the number of items."""
    bins = np.zeros(capacity + 1, dtype=np.int64)  # open bins by their room left
    opened = 0
    for size in np.flatnonzero(by_size)[::-1].tolist():
        count = int(by_size[size])
        rooms = np.flatnonzero(bins[size:]) + size  # the rooms that fit, ascending
        held = bins[rooms]
        takes = rooms // size  # what each bin of a room takes before it stops fitting
        filled = np.cumsum(held * takes)
        done = len(filled) and int(filled[-1]) >= count
        level = int(np.searchsorted(filled, count)) if done else len(rooms)
        # the rooms below ``level`` give all they can: their bins drop below ``size``
        bins[rooms[:level]] = 0
        bins[:size] += np.bincount(
            rooms[:level] % size, weights=held[:level], minlength=size
        ).astype(np.int64)
        if done:  # the items run out in the bins of room rooms[level]
            room, each = int(rooms[level]), int(takes[level])
            full, rest = divmod(count - (int(filled[level - 1]) if level else 0), each)
            bins[room] -= full + (1 if rest else 0)
            bins[room - each * size] += full
            if rest:
                bins[room - rest * size] += 1
            continue
        left = count - (int(filled[-1]) if len(filled) else 0)
        each = capacity // size
        new = -(-left // each)  # new bins, all full but the last
        bins[capacity - each * size] += new - 1
        bins[capacity - (left - each * (new - 1)) * size] += 1
        opened += new
    return opened
