"""Read measurements, each in a fresh process forked from a per-tool server that has only imported.

``benchmarks.run`` starts one server per tool family (``python -m benchmarks.measure --serve
FAMILY``) before it generates any samples; a server imports that tool's reading stack (torch
and the tool) once, then forks one reader process per measurement. So imports stay out of
both the timing and the run time (Mosaic's import alone takes ~7 s), and each reader is a new
process whose memory is its own. ``python -m benchmarks.measure TOOL MODE PATH`` runs one.

A reader returns samples, payload bytes, seconds (the iteration only; the page cache is
already warm), the sum of the first bytes (a cross-check) and peak RSS in MB:

- ``rss_mb``: this process's peak (``getrusage(RUSAGE_SELF).ru_maxrss``) plus the server's
  resident file-backed pages that fork does not map into the child (the server's VmRSS minus
  the child's at fork): what a reader started from scratch, which touched them while importing,
  would report;
- ``child_rss_mb``: the largest finished child (``RUSAGE_CHILDREN``): a DataLoader worker;
- ``anon_peak_mb``: the peak of this process's RssAnon, sampled every 20 ms: private memory
  only. RSS also counts the page-cache pages of files a reader maps (datapipe memory-maps
  its shards), which the kernel shares and can drop; RssAnon leaves them out.

TOOL is datapipe, a peer name (benchmarks.peers.PEERS) or "floor", or for W4 datapipe-img, an image
peer (benchmarks.image_peers.IMAGE_PEERS) or "pillow" (the decode floor); MODE is one (one process),
loader (torch DataLoader, 2 workers, batch 256), index (Mosaic's ds[i]), or for the floor, cat (read
the shard files in 8 MB chunks), memmap (numpy sum over an np.memmap of each shard) and copy (every
byte copied through an np.memmap into a reused 25 MiB buffer); W4's are train-one, train-loader,
eval-one, eval-loader and the floor's decode.
PATH is the tool's output directory (for the floor: the datapipe store; for pillow, the JPEG
folder).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable

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
        acc += int(mm[: words * 8].view(np.uint64).sum()) + int(mm[words * 8 :].sum())
        nbytes += len(mm)
        del mm
    return [0, nbytes, acc & 0xFFFF]


COPY_CHUNK = 25 * 2**20  # about one W2 batch


def memmap_copy(files: list[str]) -> list[int]:
    """Copy every byte of each shard through np.memmap into one reused buffer (25 MiB at a time):
    the least that delivering payloads into batch arrays costs, as a copy reads and writes every
    byte."""
    out = np.empty(COPY_CHUNK, dtype=np.uint8)
    nbytes = acc = 0
    for path in files:
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        for start in range(0, len(mm), COPY_CHUNK):
            part = mm[start : start + COPY_CHUNK]
            out[: len(part)] = part
            acc += int(out[0])
        nbytes += len(mm)
        del mm
    return [0, nbytes, acc & 0xFFFF]


FAMILIES = {
    "datapipe": "datapipe",
    "floor": "floor",
    "wds": "wds",
    "wds-int": "wds",
    "mds": "mds",
    "litdata": "litdata",
}
# W4's readers (benchmarks.image_run) have servers of their own: importing torchvision and Pillow
# into the W1/W2 servers would add their pages to every W1/W2 reader's RSS
IMAGE_FAMILIES = {
    "datapipe-img": "datapipe-img",
    "wds-img": "wds-img",
    "mds-img": "mds-img",
    "litdata-img": "litdata-img",
    "pillow": "pillow",
}
FAMILIES.update(IMAGE_FAMILIES)
BYTE_FAMILIES = ("datapipe", "floor", "wds", "mds", "litdata")


def reader(tool: str, mode: str, path: str) -> Callable[[], list[int]]:
    """The reading of PATH for this tool and mode, ready to call (the floor's file list resolved
    first)."""
    if tool == "datapipe":
        from benchmarks.ours import READERS

        return lambda: READERS[mode](path)
    if tool == "datapipe-img":
        from benchmarks.image_ours import READERS as IMAGE_READERS

        return lambda: IMAGE_READERS[mode](path)
    if tool == "pillow":
        from benchmarks.image_transforms import pillow_floor

        images = files_under(path)
        return lambda: pillow_floor(images)
    if tool in IMAGE_FAMILIES:
        from benchmarks.image_peers import IMAGE_PEERS

        return lambda: IMAGE_PEERS[tool][2][mode](path)
    if tool == "floor":
        from benchmarks.ours import shard_files

        files = shard_files(path)
        return lambda: {"cat": cat, "memmap": memmap_sum, "copy": memmap_copy}[mode](files)
    from benchmarks.peers import PEERS

    return lambda: PEERS[tool][2][mode](path)


def preimport(family: str) -> None:
    """Import a tool family's reading stack (torch included), as the server does before it forks
    readers."""
    import benchmarks.ours  # noqa: F401
    import benchmarks.peers  # noqa: F401
    import datapipe.versioning.store  # noqa: F401

    if family == "floor":
        return
    if family == "pillow":
        import PIL.Image  # noqa: F401

        return
    # the base family's stack, then torchvision's transforms and Pillow
    if family in IMAGE_FAMILIES:
        preimport(family.removesuffix("-img"))
        from benchmarks import image_transforms

        image_transforms.transform("train"), image_transforms.transform("eval")
        import benchmarks.image_ours
        import benchmarks.image_peers  # noqa: F401

        return
    import torch  # noqa: F401

    if family == "datapipe":
        import datapipe.loader.loader
        import datapipe.loader.torch  # noqa: F401
    elif family == "wds":
        import webdataset  # noqa: F401
    else:
        benchmarks.peers.patch_torchvision()
        __import__("streaming" if family == "mds" else "litdata")


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


class _AnonPeak(threading.Thread):
    """Samples this process's RssAnon (private memory: no mapped files, no page cache) every 20
    ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = _status_mb("RssAnon")
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.02):
            self.peak = max(self.peak, _status_mb("RssAnon"))

    def stop(self) -> float:
        self.done.set()
        self.join()
        return max(self.peak, _status_mb("RssAnon"))


def measure(tool: str, mode: str, path: str, server_rss_mb: float) -> dict:
    """Time one reading in this (freshly forked) process; see the module docstring for the RSS
    figures."""
    # file pages fork did not map into this process
    unmapped = max(0.0, server_rss_mb - _status_mb("VmRSS"))
    read = reader(tool, mode, path)
    anon = _AnonPeak()
    anon.start()
    t = time.perf_counter()
    samples, nbytes, first = read()
    seconds = time.perf_counter() - t
    anon_peak = anon.stop()
    del read
    gc.collect()  # DataLoader iterators are gone: their workers have been joined
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {
        "tool": tool,
        "mode": mode,
        "samples": samples,
        "bytes": nbytes,
        "first_sum": first,
        "seconds": seconds,
        "rss_mb": own + unmapped,
        "child_rss_mb": child,
        "forked_rss_mb": own,
        "unmapped_mb": unmapped,
        "anon_peak_mb": anon_peak,
    }


def _forked(request: dict) -> dict:
    """Run ``measure`` in a child forked from this server; kill its process group on timeout."""
    server_rss = _status_mb("VmRSS")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the reader: its output goes to stderr, its result through the pipe
        os.close(r)
        os.setpgid(0, 0)
        os.dup2(2, 1)
        code = 0
        try:
            result = measure(request["tool"], request["mode"], request["path"], server_rss)
        except BaseException:
            result, code = {"error": traceback.format_exc()}, 1
        with os.fdopen(w, "w") as f:
            f.write(json.dumps(result))
        # e.g. Mosaic's shared-memory cleanup; then skip the server's own shutdown
        atexit._run_exitfuncs()
        os._exit(code)
    os.close(w)
    chunks, deadline = [], time.monotonic() + request["timeout"]
    with os.fdopen(r, "rb") as f:
        while True:
            ready, _, _ = select.select([f], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"error": f"timed out after {request['timeout']} s"}
            chunk = os.read(f.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    return json.loads(data) if data else {"error": f"reader died (wait status {status})"}


def serve(family: str) -> None:
    """Import the family's stack, say "ready", then fork one reader per request line (JSON) on
    stdin."""
    preimport(family)
    print("ready", flush=True)
    for line in sys.stdin:
        print(json.dumps(_forked(json.loads(line))), flush=True)


class Readers:
    """One server process per tool family, started before the benchmark holds any samples."""

    def __init__(self, cwd: str, families: Iterable[str] = BYTE_FAMILIES) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [cwd, os.environ.get("PYTHONPATH")])),
        }
        self.servers = {
            f: subprocess.Popen(
                [sys.executable, "-m", "benchmarks.measure", "--serve", f],
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for f in families
        }

    def wait_ready(self) -> None:
        for family, proc in self.servers.items():
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(
                    f"the {family} reader server failed to start (see its stderr above)"
                )

    def read(self, tool: str, mode: str, path: str, timeout: float) -> dict:
        proc = self.servers[FAMILIES[tool]]
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(
            json.dumps({"tool": tool, "mode": mode, "path": path, "timeout": timeout}) + "\n"
        )
        proc.stdin.flush()
        line = proc.stdout.readline()
        result = json.loads(line) if line else {"error": "the reader server died"}
        if "error" in result:
            raise RuntimeError(
                f"reading {path} with {tool} ({mode}) failed:\n{result['error'][-3000:]}"
            )
        return result

    def close(self) -> None:
        for proc in self.servers.values():
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in self.servers.values():
            proc.wait(timeout=60)

    def __enter__(self) -> Readers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description="A reader server (used by benchmarks.run), or one reading."
    )
    parser.add_argument("--serve", metavar="FAMILY", choices=sorted(set(FAMILIES.values())))
    parser.add_argument("read", nargs="*", metavar="TOOL MODE PATH")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
    else:
        tool, mode, path = args.read
        preimport(FAMILIES[tool])
        print(json.dumps(_forked({"tool": tool, "mode": mode, "path": path, "timeout": 3600})))


if __name__ == "__main__":
    main()
