"""One read measurement in a fresh process: ``python -m benchmarks.measure TOOL MODE PATH``.

Prints one JSON line: samples, payload bytes, seconds (iteration only, after the imports and
with the page cache already warm), the sum of the first bytes (a cross-check) and peak RSS in
MB of this process (``RUSAGE_SELF``) and of its largest finished child (``RUSAGE_CHILDREN``:
a DataLoader worker). The parent runs each measurement in its own process so that peak RSS
belongs to that tool alone.

TOOL is datapipe, a peer name (benchmarks.peers.PEERS) or "floor"; MODE is one (one process),
loader (torch DataLoader, 2 workers, batch 256), index (Mosaic's ds[i]), or for the floor,
cat (read the shard files in 8 MB chunks) and memmap (numpy sum over an np.memmap of each shard).
PATH is the tool's output directory (for the floor: the datapipe store).
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time

import numpy as np

CHUNK = 8 * 2**20


def warm(paths: list[str]) -> int:
    """Read every file once (into the page cache); returns the bytes read."""
    buf = bytearray(CHUNK)
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total


def files_under(path: str) -> list[str]:
    """Every regular file below ``path``, sorted."""
    return sorted(os.path.join(d, f) for d, _, names in os.walk(path) for f in names)


def cat(files: list[str]) -> list[int]:
    nbytes = warm(files)
    return [0, nbytes, 0]


def memmap_sum(files: list[str]) -> list[int]:
    """Sum every 8-byte word (wrapping) of each shard through np.memmap: every page is read."""
    nbytes = acc = 0
    for path in files:
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        words = len(mm) // 8
        acc += int(mm[:words * 8].view(np.uint64).sum()) + int(mm[words * 8:].sum())
        nbytes += len(mm)
        del mm
    return [0, nbytes, acc & 0xFFFF]


def reader(tool: str, mode: str):
    """The function that reads PATH for this tool and mode."""
    if tool == "datapipe":
        from benchmarks.ours import READERS
        return READERS[mode]
    if tool == "floor":
        from benchmarks.ours import shard_files
        return lambda out: {"cat": cat, "memmap": memmap_sum}[mode](shard_files(out))
    from benchmarks.peers import PEERS
    return PEERS[tool][2][mode]


def preimport(tool: str) -> None:
    """Import the tool's reading stack (torch included) before the clock starts."""
    if tool == "floor":
        return
    import torch  # noqa: F401

    if tool == "datapipe":
        import datapipe.loader.loader
        import datapipe.loader.torch  # noqa: F401
    elif tool.startswith("wds"):
        import webdataset  # noqa: F401
    else:
        from benchmarks.peers import patch_torchvision

        patch_torchvision()
        __import__("streaming" if tool == "mds" else "litdata")


def peak_rss_mb() -> tuple[float, float]:
    """(this process, largest finished child) peak RSS in MB (ru_maxrss is KiB on Linux)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, child


def measure(tool: str, mode: str, path: str) -> dict:
    read = reader(tool, mode)
    preimport(tool)
    t = time.perf_counter()
    samples, nbytes, first = read(path)
    seconds = time.perf_counter() - t
    gc.collect()  # DataLoader iterators are gone: their workers have been joined
    own, child = peak_rss_mb()
    return {"tool": tool, "mode": mode, "samples": samples, "bytes": nbytes, "first_sum": first,
            "seconds": seconds, "rss_mb": own, "child_rss_mb": child}


def main() -> None:
    tool, mode, path = sys.argv[1:4]
    print(json.dumps(measure(tool, mode, path)), flush=True)


if __name__ == "__main__":
    main()
