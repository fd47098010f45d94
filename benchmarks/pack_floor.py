"""W6's floor: the same token bytes copied from the memory-mapped ``.bin`` files into int64
``[8, L + 1]`` batch arrays, in one process, in storage order (issue 32).

Row r of a shard holds its tokens [r L, (r + 1) L + 1), as a concat row does (the last one only
a label): the least any loader of rows of ``L`` tokens does, a read of every token once and a
widening copy into a new batch array, with no plan, no shuffle and no other field.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def imports() -> None:
    """numpy only."""


def batches(spec: dict) -> Iterator[np.ndarray]:
    """Every full batch of ``spec["batch"]`` rows of ``spec["length"] + 1`` tokens of each shard
    of ``spec["shards"]`` (token dtype ``spec["dtype"]``), as new int64 arrays."""
    length, batch = spec["length"], spec["batch"]
    dtype = np.dtype(spec["dtype"])
    for path in spec["shards"]:
        ids = np.memmap(path, dtype=dtype, mode="r")
        rows = max(0, (len(ids) - 1) // length)
        step = length * dtype.itemsize
        for first in range(0, rows - batch + 1, batch):
            view = np.lib.stride_tricks.as_strided(
                ids[first * length :], shape=(batch, length + 1), strides=(step, dtype.itemsize)
            )
            yield view.astype(np.int64)
        del ids
