"""Copies of big payloads into a batch array, split over a few threads.

One core copies less than the memory system delivers, and numpy releases the GIL for each slice
copy, so threads copying parts of a big batch go faster. Batches under PARALLEL_BYTES stay on the
calling thread, where handing work to another costs more than it saves. DataLoader workers copy on
their own thread only (``set_threads(1)``): the workers already use the cores.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import numpy as np

PARALLEL_BYTES = 4 << 20
MAX_THREADS = 4

# (source buffer, destination starts, source offsets, sizes): plain lists, one entry per payload
Copies = tuple[Any, list[int], list[int], list[int]]


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


_threads = min(MAX_THREADS, _available_cpus())
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_lock = threading.Lock()


def set_threads(n: int) -> None:
    """Copy big batches with up to ``n`` threads in this process (1: on the calling thread only)."""
    global _threads
    _threads = max(1, int(n))


def threads() -> int:
    """How many threads copy a big batch in this process."""
    return _threads


def _executor() -> ThreadPoolExecutor:
    """This process's pool; a new one after a fork (the parent's threads do not exist in the
    child)."""
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(MAX_THREADS - 1, thread_name_prefix="datapipe-copy")
            _pool_pid = os.getpid()
        return _pool


def _run(out: np.ndarray, jobs: list[Copies]) -> None:
    for source, starts, offsets, sizes in jobs:
        src = np.frombuffer(source, dtype=np.uint8)
        for start, offset, size in zip(starts, offsets, sizes, strict=True):
            out[start : start + size] = src[offset : offset + size]


def copy_payloads(out: np.ndarray, jobs: list[Copies]) -> None:
    """``out[start:start+size] = source[offset:offset+size]`` for every payload of ``jobs``."""
    total = sum(sum(sizes) for *_, sizes in jobs)
    n = min(_threads, max(1, sum(len(sizes) for *_, sizes in jobs)))
    if n == 1 or total < PARALLEL_BYTES:
        _run(out, jobs)
        return
    shares: list[list[Copies]] = [[] for _ in range(n)]
    # each thread takes a slice of every part: big payloads are alike
    for source, starts, offsets, sizes in jobs:
        k = len(sizes)
        for t in range(n):
            lo, hi = k * t // n, k * (t + 1) // n
            if hi > lo:
                shares[t].append((source, starts[lo:hi], offsets[lo:hi], sizes[lo:hi]))
    futures = [_executor().submit(_run, out, share) for share in shares[1:]]
    try:
        _run(out, shares[0])
    finally:
        wait(futures)  # the threads write into ``out``: never return (or raise) while they still do
    for future in futures:
        future.result()
