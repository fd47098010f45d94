"""W4 in ``benchmarks.run``: make the JPEG folders, write them with every tool, read them through
both transforms.

Writes: each peer's own writer from the files, and ``datapipe build`` of the folders with 2 Dask
workers (its wall time, interpreter and cluster start-up included). Reads, in rounds like W1/W2
(``benchmarks.run.read_rounds``): train and eval transforms, in one process and with 2
DataLoader workers, for each peer and datapipe, and the floor: Pillow's full decode of the same
files in one process (one core).
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import time
from collections.abc import Callable

from benchmarks import building, image_ours, measure
from benchmarks.image_peers import IMAGE_PEERS
from benchmarks.images import ImageWorkload, generate, jpeg_files
from benchmarks.measure import Readers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OURS = "datapipe-img"
FLOOR = "pillow"
TOOLS = [OURS, *IMAGE_PEERS]
FAMILIES = [*TOOLS, FLOOR]  # each its own reader server (see benchmarks.measure.FAMILIES)
READ_MODES = list(IMAGE_PEERS["wds-img"][2])  # train-one, train-loader, eval-one, eval-loader


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def decoder_ready() -> bool:
    """Whether this datapipe has issue 18's image decoder (``datapipe.image``); its reads are
    skipped before."""
    import datapipe

    return hasattr(datapipe, "image")


def _disk(path: str) -> int:
    return sum(os.path.getsize(f) for f in measure.files_under(path))


def build_env() -> dict:
    """The environment of ``datapipe build``: its map stage is ``benchmarks.image_ours``, so ROOT is
    on the path."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
    }


def write_all(w: ImageWorkload, images: str, workdir: str, timeout: float) -> dict:
    """Every peer's writer, then ``datapipe build``; {tool: {"write": {seconds, disk_bytes}, "read":
    {}}}."""
    files = jpeg_files(w, images)
    measure.warm([p for p, _ in files])
    tools = {}
    for tool, (_, write, _) in IMAGE_PEERS.items():
        out = os.path.join(workdir, tool)
        shutil.rmtree(out, ignore_errors=True)
        gc.collect()
        t = time.perf_counter()
        write(files, out)
        seconds = time.perf_counter() - t
        tools[tool] = {"write": {"seconds": seconds, "disk_bytes": _disk(out)}, "read": {}}
        log(f"  write {tool}: {seconds:.2f}s, {w.images / seconds:,.0f} images/s")
    pipeline = image_ours.prepare(images, os.path.join(workdir, "source"))
    env = build_env()
    b = building.build(pipeline, os.path.join(workdir, OURS), 2, timeout, keep=True, env=env)
    tools[OURS] = {
        "write": {"seconds": b["seconds"], "disk_bytes": _disk(os.path.join(workdir, OURS))},
        "build": b,
        "read": {},
    }
    log(
        f"  datapipe build, 2 workers: {b['seconds']:.1f}s, {w.images / b['seconds']:,.0f} images/s"
    )
    return tools


def run_w4(
    readers: Readers,
    w: ImageWorkload,
    workdir: str,
    timeout: float,
    repeats: int,
    read_rounds: Callable,
) -> dict:
    """The whole of W4; the result that ``benchmarks.image_report`` turns into rows."""
    log(w.describe())
    images = os.path.join(workdir, "jpeg")
    t = time.perf_counter()
    stats = generate(w, images)
    log(
        f"  images: {stats['images']:,} in {time.perf_counter() - t:.0f}s, mean "
        f"{stats['mean_bytes'] / 1e3:.1f} KB, "
        f"{stats['mean_width']:.0f}x{stats['mean_height']:.0f}"
    )
    result = {
        "workload": w.name,
        "kind": "images",
        "describe": w.describe(),
        "samples": w.images,
        "images": stats,
        "tools": write_all(w, images, workdir, timeout),
    }
    tools = [t for t in TOOLS if t != OURS or decoder_ready()]
    if OURS not in tools:
        log(
            "  datapipe.image does not exist yet (issue 18's decoder): datapipe's "
            "W4 reads are skipped"
        )
    reads = [(tool, mode, os.path.join(workdir, tool)) for tool in tools for mode in READ_MODES]
    result["floor"] = {}
    for (tool, mode), r in read_rounds(
        readers, reads + [(FLOOR, "decode", images)], timeout, repeats
    ).items():
        line = (
            f"{r['samples'] / r['seconds']:,.0f} images/s, RSS "
            f"{r['rss_mb']:.0f}+{r['child_rss_mb']:.0f} MB"
        )
        if tool == FLOOR:
            result["floor"][mode] = r
            log(f"  floor: Pillow full decode, 1 process: {line}")
        else:
            result["tools"][tool]["read"][mode] = r
            log(f"  read {tool} {mode}: {line}")
    return result
