"""datapipe against WebDataset, MosaicML Streaming and LitData, in one run on one machine (issue 6).

    python -m benchmarks.run [--quick] [--workdir DIR] [--out DIR] [--workloads w1,w2,w4,w5]

For each workload (W1: 200,000 x 1 KiB, W2: 10,000 x 100 KiB; a tenth with --quick): write it
from memory with every tool, read each result back in a fresh process (one process, then a
DataLoader with 2 workers), measure the cat and memmap floors on datapipe's shards and time
``datapipe build`` from Parquet with 1 and 2 Dask workers. Prints the table and writes
results.json, results.md and results.png to --out. W4 (issue 18: 20,000 JPEGs, train and eval
transforms) is ``benchmarks.image_run``; W5 (issue 31: text to token ids, only when asked for)
is ``benchmarks.token_run``; W6 (issue 32: W5's token version read as packed rows, only when
asked for) is ``benchmarks.pack_run``. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time

from benchmarks import building, image_run, measure, ours, pack_run, report, token_run, write_floor
from benchmarks.images import image_workload
from benchmarks.machine import load_average as _load
from benchmarks.machine import machine
from benchmarks.measure import BYTE_FAMILIES, Readers
from benchmarks.peers import PEERS, import_all
from benchmarks.text import text_workload
from benchmarks.workloads import Data, Workload, generate, workloads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# default decode, then ragged
READ_MODES = {
    "datapipe": ["one", "loader", "one-ragged", "loader-ragged"],
    **{name: list(p[2]) for name, p in PEERS.items()},
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def disk_bytes(path: str) -> int:
    return sum(os.path.getsize(f) for f in measure.files_under(path))


def write_all(data: Data, workdir: str) -> dict:
    """Write the samples with every tool; {tool: {"write": {seconds, disk_bytes}}}."""
    writers = {"datapipe": ours.write, **{name: p[1] for name, p in PEERS.items()}}
    tools = {}
    for tool, write in writers.items():
        out = os.path.join(workdir, tool)
        shutil.rmtree(out, ignore_errors=True)
        gc.collect()
        t = time.perf_counter()
        write(data, out)
        seconds = time.perf_counter() - t
        tools[tool] = {"write": {"seconds": seconds, "disk_bytes": disk_bytes(out)}, "read": {}}
        log(f"  write {tool}: {seconds:.2f}s, {data.workload.samples / seconds:,.0f} samples/s")
        if not READ_MODES.get(tool):
            shutil.rmtree(out)
    return tools


def write_floors(data: Data, workdir: str) -> dict:
    """The write floors of ``benchmarks.write_floor`` on the same samples, in seconds."""
    gc.collect()
    floors = {
        "hash_copy": write_floor.hash_and_copy(data),
        "hash_copy_file": write_floor.hash_copy_and_write(
            data, os.path.join(workdir, "write-floor")
        ),
    }
    for name, seconds in floors.items():
        log(f"  write floor {name}: {data.payload_bytes / seconds / 1e6:,.0f} MB/s")
    return floors


WORKLOADS = ("w1", "w2", "w4", "w5", "w6")  # W3 is benchmarks/build_scale.py
DEFAULT = ("w1", "w2", "w4")  # W5 takes ~40 minutes on 2 cores and peers of its own: when asked
# seconds: reads quicker than this are measured three times, and the median kept
REPEAT_UNDER = 10.0


def read_one(
    readers: Readers, tool: str, mode: str, path: str, timeout: float, repeats: int = 1
) -> dict:
    """A measurement in a fresh reader process, after reading the files once (warm page cache); with
    ``repeats``, the median by rate of that many (each one in "runs")."""
    return read_rounds(readers, [(tool, mode, path)], timeout, repeats)[(tool, mode)]


def read_rounds(
    readers: Readers, reads: list[tuple[str, str, str]], timeout: float, repeats: int
) -> dict[tuple[str, str], dict]:
    """Each (tool, mode, path) measured in rounds: every read once per round, ``repeats`` rounds,
    each in a fresh reader process after reading the files once (warm page cache); the median by
    rate is kept.

    The VM's speed drifts by 2x within minutes (LitData's W1 read: 131-292k/s in three runs of one
    afternoon). Read tool after tool, each tool's repeats would sample a different minute and the
    ratios the drift; interleaved, every tool's median comes from the same minutes. A read that
    takes REPEAT_UNDER seconds or more, or fails, is not repeated.
    """
    runs: dict[tuple[str, str], list[dict]] = {(tool, mode): [] for tool, mode, _ in reads}
    for _ in range(repeats):
        for tool, mode, path in reads:
            done = runs[(tool, mode)]
            if done and ("seconds" not in done[-1] or done[-1]["seconds"] >= REPEAT_UNDER):
                continue
            measure.warm(measure.files_under(path))
            done.append(readers.read(tool, mode, path, timeout))
    return {key: _median(done) for key, done in runs.items()}


def _median(runs: list[dict]) -> dict:
    failed = [r for r in runs if "seconds" not in r]
    if len(runs) == 1 or failed:
        return (failed or runs)[0]
    median = sorted(runs, key=lambda r: r["samples"] / r["seconds"])[len(runs) // 2]
    return {**median, "runs": [{k: r[k] for k in ("samples", "seconds", "rss_mb")} for r in runs]}


def run_workload(readers: Readers, w: Workload, workdir: str, timeout: float, repeats: int) -> dict:
    log(w.describe())
    data = generate(w)
    result = {
        "workload": w.name,
        "describe": w.describe(),
        "samples": w.samples,
        "payload_size": w.payload,
        "payload_bytes": data.payload_bytes,
        "tools": write_all(data, workdir),
        "write_floor": write_floors(data, workdir),
    }
    pipeline = building.prepare(data, os.path.join(workdir, "source"))
    del data
    gc.collect()
    reads = [
        (tool, mode, os.path.join(workdir, tool))
        for tool, modes in READ_MODES.items()
        for mode in modes
    ]
    floors = [
        ("floor", mode, os.path.join(workdir, "datapipe")) for mode in ("cat", "memmap", "copy")
    ]
    result["floor"] = {}
    for (tool, mode), r in read_rounds(readers, reads + floors, timeout, repeats).items():
        if tool == "floor":  # in the same rounds as the reads: a floor of the same minutes
            result["floor"][mode] = r
            log(f"  floor {mode}: {r['bytes'] / r['seconds'] / 1e9:.2f} GB/s")
            continue
        result["tools"][tool]["read"][mode] = r
        log(
            f"  read {tool} {mode}: {r['samples'] / r['seconds']:,.0f} samples/s, "
            f"{r['bytes'] / r['seconds'] / 1e6:,.0f} MB/s, RSS "
            f"{r['rss_mb']:.0f}+{r['child_rss_mb']:.0f} MB"
        )
    # memory must not grow with the shard count: the same samples in 10x as many shards
    if w.name == "w1":
        many = os.path.join(workdir, "datapipe-10x-shards")
        ours.write(generate(w), many, shard_bytes=ours.SHARD_BYTES // 10)
        r = read_one(readers, "datapipe", "one", many, timeout, repeats)
        result["rss_10x_shards"] = r
        log(
            f"  read datapipe one, 10x shards: {r['samples'] / r['seconds']:,.0f} "
            f"samples/s, RSS {r['rss_mb']:.0f} MB"
        )
        shutil.rmtree(many)
    result["build"] = []
    for workers in (1, 2):
        b = building.build(pipeline, os.path.join(workdir, "built"), workers, timeout)
        result["build"].append(b)
        log(
            f"  build, {workers} worker(s): {b['seconds']:.1f}s, "
            f"{w.samples / b['seconds']:,.0f} samples/s"
        )
    # issue 6's build target is W1 with 2 workers: what start-up alone leaves of it
    if w.name == "w1":
        f = result["build_fixed"] = building.fixed_costs(
            w, os.path.join(workdir, "fixed"), 2, repeats
        )
        log(
            f"  build of 10 rows, 2 workers: {f['build_10_rows']:.2f}s; Dask floor "
            f"{f['dask_floor']:.2f}s"
        )
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a tenth of the samples (a smoke run, < 2 minutes)"
    )
    parser.add_argument(
        "--workdir", help="where the datasets go (kept); default: a temporary directory, removed"
    )
    parser.add_argument(
        "--out",
        default=os.path.join(ROOT, "benchmarks", "results"),
        help="where results.json/.md/.png go [benchmarks/results]",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800, help="seconds allowed for one measurement"
    )
    parser.add_argument(
        "--w5-rounds",
        type=int,
        default=2,
        help="W5's rounds (each measurement of it takes minutes; 1 with --quick) [2]",
    )
    parser.add_argument(
        "--workloads",
        default=",".join(DEFAULT),
        help=f"comma-separated, of {', '.join(WORKLOADS)} [{','.join(DEFAULT)}]",
    )
    args = parser.parse_args(argv)
    chosen = [n.strip().lower() for n in args.workloads.split(",") if n.strip()]
    if not chosen or set(chosen) - set(WORKLOADS):
        parser.error(
            f"--workloads: {args.workloads!r}; use a comma-separated list of {', '.join(WORKLOADS)}"
        )
    families = ([*BYTE_FAMILIES] if set(chosen) & {"w1", "w2"} else []) + (
        image_run.FAMILIES if "w4" in chosen else []
    )
    start = time.perf_counter()
    results = {"quick": args.quick, "machine": machine(), "workloads": {}}
    tmp = None if args.workdir else tempfile.mkdtemp(prefix="datapipe-bench-")
    workdir = args.workdir or tmp
    try:
        with Readers(ROOT, families) as readers:
            if families:  # the peers' writers, while the reader servers import theirs
                import_all()
            readers.wait_ready()
            repeats = 1 if args.quick else 3
            for w in workloads(args.quick):
                if w.name in chosen:
                    results["workloads"][w.name] = run_workload(
                        readers, w, os.path.join(workdir, w.name), args.timeout, repeats
                    )
                if tmp:
                    shutil.rmtree(os.path.join(workdir, w.name), ignore_errors=True)
            if "w4" in chosen:
                results["workloads"]["w4"] = image_run.run_w4(
                    readers,
                    image_workload(args.quick),
                    os.path.join(workdir, "w4"),
                    args.timeout,
                    repeats,
                    read_rounds,
                )
            if "w5" in chosen:
                results["workloads"]["w5"] = token_run.run_w5(
                    text_workload(args.quick),
                    os.path.join(workdir, "w5-quick" if args.quick else "w5"),
                    args.timeout,
                    1 if args.quick else args.w5_rounds,
                )
            if "w6" in chosen:  # W5's token version read as packed rows (issue 32)
                results["workloads"]["w6"] = pack_run.run_w6(
                    text_workload(args.quick), workdir, args.timeout, *pack_run.settings(args.quick)
                )
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    results["machine"]["load_after"] = _load()
    if set(chosen) & {"w1", "w2"}:  # the decode note is about their reads
        results["machine"]["datapipe_decode"] = "both"
    results["seconds"] = time.perf_counter() - start
    print(report.markdown(results))
    for problem in report.check(results):
        print(f"warning: {problem}")
    # a run of W1/W2 writes results.*; one of W4 or W5 alone results-w4.* or results-w5.*
    stem = "results" if set(chosen) & {"w1", "w2"} else "-".join(["results", *sorted(chosen)])
    paths = report.save(results, args.out, stem)
    log(f"done in {results['seconds']:.0f}s; wrote {', '.join(paths.values())}")


if __name__ == "__main__":
    main()
