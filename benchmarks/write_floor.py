"""What writing a workload's bytes costs with no format at all: the floors beside the writers' rows.

``hash_and_copy``: every payload byte copied once (joined into ~64 MB buffers, the size of a shard)
and hashed once with sha256: the least a writer that content-addresses its shards can do (issue 17's
W2 floor).
``hash_copy_and_write``: that, and each buffer written to a new file (page cache, no fsync), as the
writers' figures are.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Iterator

from benchmarks.peers import SHARD_BYTES
from benchmarks.workloads import Data


def _buffers(data: Data) -> Iterator[bytes]:
    """The payloads (bin and label) joined into buffers of about SHARD_BYTES, one copy per byte."""
    group: list[bytes] = []
    size = 0
    for s in data.samples:
        group += (s["bin"], s["cls"])
        size += len(s["bin"]) + len(s["cls"])
        if size >= SHARD_BYTES:
            yield b"".join(group)
            group, size = [], 0
    if group:
        yield b"".join(group)


def hash_and_copy(data: Data) -> float:
    """Seconds to copy every payload byte once and sha256 it once."""
    start = time.perf_counter()
    for buffer in _buffers(data):
        hashlib.sha256(buffer).digest()
    return time.perf_counter() - start


def hash_copy_and_write(data: Data, out: str) -> float:
    """Seconds for ``hash_and_copy`` plus writing each buffer to a new file under ``out`` (removed
    after)."""
    os.makedirs(out, exist_ok=True)
    start = time.perf_counter()
    for i, buffer in enumerate(_buffers(data)):
        hashlib.sha256(buffer).digest()
        with open(os.path.join(out, f"{i:06d}.bin"), "wb") as f:
            f.write(buffer)
    seconds = time.perf_counter() - start
    shutil.rmtree(out)
    return seconds
