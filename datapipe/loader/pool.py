"""Reuse of big batch buffers in one process, once the consumer has let go of them.

A fresh big buffer costs a page fault per 4 KiB page (the allocator maps new memory for each one
while several batches are alive: held by the loop, or ahead in a queue): more than copying the
payloads into it. Buffers are taken back when CPython's reference count shows that only the pool
holds them; batches handed on (a tensor over the buffer, a slice of it) keep theirs alive until
dropped.
"""

from __future__ import annotations

import mmap
import sys
import threading

import numpy as np

MIN_POOLED = 1 << 20  # smaller buffers come from malloc's free lists without faults anyway
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux


def fresh_buffer(nbytes: int) -> np.ndarray:
    """A new uint8 array whose pages the kernel maps in one call (MAP_POPULATE), not one fault
    per 4 KiB page at first write, so a new buffer fills faster. Each process pays that once for
    each buffer it keeps in flight."""
    if not _POPULATE:
        return np.empty(nbytes, dtype=np.uint8)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE)
    # the array keeps the mapping; unmapped when it is freed
    return np.frombuffer(region, dtype=np.uint8)


class BufferPool:
    """Gives uint8 arrays of a requested size, reusing up to ``keep`` buffers nobody else refers
    to."""

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._buffers: list[np.ndarray] = []
        self._lock = threading.Lock()

    def allocate(self, nbytes: int) -> np.ndarray:
        """A writable array of ``nbytes`` bytes (contents undefined)."""
        if nbytes < MIN_POOLED:
            return np.empty(nbytes, dtype=np.uint8)
        with self._lock:
            # not enumerate: its reused result tuple holds a reference
            for i in range(len(self._buffers)):
                buffer = self._buffers[i]
                # references: the list, ``buffer``, getrefcount's argument; any more is a live batch
                if nbytes <= len(buffer) <= 2 * nbytes and sys.getrefcount(buffer) == 3:
                    self._buffers.append(self._buffers.pop(i))  # most recently used last
                    return buffer[:nbytes]
            buffer = fresh_buffer(nbytes)
            self._buffers.append(buffer)
            if len(self._buffers) > self.keep:
                self._buffers.pop(0)  # a batch still holding it keeps it alive; the pool forgets it
            return buffer[:nbytes]
