"""glibc's allocator in a Dask worker: undo the nanny's fixed trim threshold.

Dask's nanny starts each worker with ``MALLOC_TRIM_THRESHOLD_=65536``
(``distributed.nanny.pre-spawn-environ``). Setting that variable also fixes glibc's mmap threshold
at 128 KiB, so every buffer a build task makes (tar blocks, pieces pickled between workers, shard
files) is a new mapping whose pages fault in on first touch and go back to the system when freed:
time the embedded cluster's workers, forked from a server started without the variable, never pay.
Where the variable is set in a worker with room (a memory limit of at least ROOM, or none),
``restore_dynamic_thresholds`` sets the thresholds to the top of glibc's own dynamic range once per
process: big buffers are reused from the heap, and the heap is still trimmed above 64 MiB of free
top. A small worker keeps Dask's setting: the memory a heap keeps would count against its limit,
and Dask pauses a worker at 80% of it.
"""

from __future__ import annotations

import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
# glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: where its dynamic threshold stops
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what glibc's dynamic rule sets beside it
ROOM = 2 << 30  # the least memory limit of a worker whose thresholds are raised

_done = False


def restore_dynamic_thresholds() -> bool:
    """In a Dask worker started with MALLOC_TRIM_THRESHOLD_, raise glibc's mmap and trim thresholds
    (once per process); whether this call changed them."""
    global _done
    if _done or "MALLOC_TRIM_THRESHOLD_" not in os.environ or not _worker_with_room():
        return False
    _done = True
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to undo
        return False
    mmap_set = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return mmap_set and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def _worker_with_room() -> bool:
    """Whether this runs in a Dask worker whose memory limit is ROOM or more, or none."""
    import sys

    if "distributed" not in sys.modules:
        return False
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:
        return False
    limit = getattr(getattr(worker, "memory_manager", None), "memory_limit", None)
    return not limit or limit >= ROOM
