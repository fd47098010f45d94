"""Small samples scattered over a shard (a shuffled batch's) read by pread, not through the map."""

from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np

from datapipe.errors import ShardCorruptError
from datapipe.formats.base import ShardReader

# a shard's samples in a batch that spread over more than SPARSE x their bytes are read by pread
SPARSE = 8
SMALL_SAMPLE = 64 << 10  # ... when they average under this (bigger samples fault in few pages each)
OPEN_FDS = 64  # descriptors kept open for those reads, most recently used


class ScatteredReads:
    """Reads of scattered samples by pread, through descriptors of the shards' local files, at most
    OPEN_FDS of them open (a dataset may have more shards than the process may open files).

    One pread per sample costs less than faulting the map's pages in and unmapping them after the
    batch to bound resident memory.
    The descriptors are this process's: a pickled copy starts with none.
    """

    def __init__(self) -> None:
        self._fds: OrderedDict[int, int] = OrderedDict()  # shard -> descriptor, least recent first

    def __len__(self) -> int:
        """Descriptors open."""
        return len(self._fds)

    def read(
        self, shard: int, path: str, reader: ShardReader, rows: np.ndarray
    ) -> tuple[memoryview, np.ndarray] | None:
        """Rows ``rows`` of ``shard`` (its local file at ``path``), each one's bytes by one pread
        into a buffer, and per sample the shift from shard offsets to that buffer; None where they
        are better read through the map (consecutive, few, big, or close together)."""
        index = reader.index
        if index is None or len(rows) < 2 or int(rows[-1]) - int(rows[0]) == len(rows) - 1:
            return None  # (consecutive rows: one span of the map, not scattered)
        starts = index.sample_start[rows].astype(np.int64)
        ends = index.sample_end[rows].astype(np.int64)
        need = int((ends - starts).sum())
        if int(ends.max() - starts.min()) <= SPARSE * need or need > SMALL_SAMPLE * len(rows):
            return None
        fd = self._descriptor(shard, path)
        copy = memoryview(np.empty(need, dtype=np.uint8))
        at = np.cumsum(ends - starts) - (ends - starts)
        for to, start, end in zip(at.tolist(), starts.tolist(), ends.tolist(), strict=True):
            if os.preadv(fd, [copy[to : to + end - start]], start) != end - start:
                problem = "shorter than its index says; it changed while being read"
                raise ShardCorruptError(reader.name, problem, start)
        return copy, at - starts

    def _descriptor(self, shard: int, path: str) -> int:
        """An open descriptor of ``shard``'s local file, the least recently used one closed past
        OPEN_FDS."""
        fd = self._fds.get(shard)
        if fd is None:
            fd = self._fds[shard] = os.open(path, os.O_RDONLY)
            if len(self._fds) > OPEN_FDS:
                os.close(self._fds.popitem(last=False)[1])
        else:
            self._fds.move_to_end(shard)
        return fd

    def forget(self, shard: int) -> None:
        """Close ``shard``'s descriptor, if open (its file may go from the cache now)."""
        fd = self._fds.pop(shard, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        """Close every descriptor."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __getstate__(self) -> dict[str, object]:
        return {"_fds": OrderedDict()}  # descriptors are this process's
