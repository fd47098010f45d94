"""glibc's allocator in a Dask worker: the nanny's fixed trim threshold undone in a worker with
room, and made sure of in a small one.

Dask's nanny starts each worker with ``MALLOC_TRIM_THRESHOLD_=65536``
(``distributed.nanny.pre-spawn-environ``). Setting that variable also fixes glibc's mmap threshold
at 128 KiB, so every buffer a build task makes (tar blocks, pieces pickled between workers, shard
files) is a new mapping whose pages fault in on first touch and go back to the system when freed:
time the embedded cluster's workers, forked from a server started without the variable, never pay.
Where the variable is set in a worker with room (a memory limit of at least ROOM, or none),
``fit_worker_thresholds`` sets the thresholds to the top of glibc's own dynamic range once per
process: big buffers are reused from the heap, and the heap is still trimmed above 64 MiB of free
top. A small worker has Dask's setting: the memory a heap keeps would count against its limit,
and Dask pauses a worker at 80% of it. The embedded cluster's workers, forked from a server whose
allocator started without the variable, get it from ``mallopt`` (the variable in their environment
comes too late to count): with glibc's dynamic thresholds, a near_dedupe build's 600 MB workers kept
their signing passes' heap and paused in the next pass.
"""

from __future__ import annotations

import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
# glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: where its dynamic threshold stops
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what glibc's dynamic rule sets beside it
DASK_MMAP_THRESHOLD = 128 << 10  # glibc's default, which the nanny's variable fixes
DASK_TRIM_THRESHOLD = 65536  # the nanny's MALLOC_TRIM_THRESHOLD_
ROOM = 2 << 30  # the least memory limit of a worker whose thresholds are raised

_done = False


def fit_worker_thresholds() -> bool:
    """In a Dask worker (once per process): with room and started with MALLOC_TRIM_THRESHOLD_,
    glibc's mmap and trim thresholds raised; without room, fixed where the nanny's variable fixes
    them. Whether this call changed them."""
    global _done
    room = None if _done else _worker_room()
    if room is None or (room and "MALLOC_TRIM_THRESHOLD_" not in os.environ):
        return False
    _done = True
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to undo
        return False
    mmap, trim = (
        (MMAP_THRESHOLD, TRIM_THRESHOLD) if room else (DASK_MMAP_THRESHOLD, DASK_TRIM_THRESHOLD)
    )
    return bool(mallopt(M_MMAP_THRESHOLD, mmap)) and bool(mallopt(M_TRIM_THRESHOLD, trim))


def _worker_room() -> bool | None:
    """Whether this Dask worker's memory limit is ROOM or more, or none; None outside a worker."""
    import sys

    if "distributed" not in sys.modules:
        return None
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:
        return None
    limit = getattr(getattr(worker, "memory_manager", None), "memory_limit", None)
    return not limit or limit >= ROOM
