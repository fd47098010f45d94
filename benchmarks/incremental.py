"""Issue 19: incremental rebuilds of W3 in 100 Parquet files, after a file is added, edited or
removed.

``python -m benchmarks.incremental [--samples N] [--files 100] [--workdir DIR] [--workers 2]``
writes W3 (2,000,000 x 1 KiB + int label by default) as FILES Parquet files of 16 MB row groups,
builds it with ``datapipe build --workers N`` (the full build), then for each change (a file added
in the middle of the source order, that file edited, a file removed) rebuilds from the previous
version REPEAT times (from a hard-linked copy of the store as it was) and once from scratch into an
empty store, each in a fresh process; prints the rebuild's median wall seconds and shard bytes
written (the summary's ``incremental.shards.bytes_written``), as shares of the median of the four
full builds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

PIPELINE = """name: w3
source: {path: raw/*.parquet, format: parquet}
sample: {key: key, fields: {cls: label, bin: payload}}
shards: {max_bytes: 64MB}
"""


def write_file(path: str, first: int, n: int, seed: int) -> None:
    """Samples ``first`` .. ``first + n - 1`` of W3 (keys s00000000 on) as one Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng, rows = np.random.default_rng(seed), 16 * 10**6 // (1024 + 16)
    schema = pa.schema([("key", pa.string()), ("label", pa.int64()), ("payload", pa.binary())])
    with pq.ParquetWriter(path + ".partial", schema, compression="none") as writer:
        for start in range(first, first + n, rows):
            m = min(rows, first + n - start)
            blob = rng.bytes(m * 1024)
            writer.write_table(
                pa.table(
                    {
                        "key": pa.array(
                            [f"s{i:08d}" for i in range(start, start + m)], pa.string()
                        ),
                        "label": pa.array(rng.integers(0, 10, m), pa.int64()),
                        "payload": pa.array(
                            [blob[j * 1024 : (j + 1) * 1024] for j in range(m)], pa.binary()
                        ),
                    },
                    schema=schema,
                ),
                row_group_size=rows,
            )
    os.replace(path + ".partial", path)


def build(workdir: str, store: str, workers: int) -> dict:
    """One `datapipe build` from outside: wall seconds and its summary. The page cache is flushed
    first, so a build does not pay for writing back the one before it."""
    os.sync()
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "datapipe",
            "build",
            os.path.join(workdir, "w3.yaml"),
            "--out",
            store,
            "--json",
            "--workers",
            str(workers),
        ],
        capture_output=True,
        text=True,
        cwd=workdir,
    )
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return {"seconds": seconds, "summary": json.loads(done.stdout.strip().splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workdir", default=None)
    parser.add_argument(
        "--repeat", type=int, default=3, help="times each rebuild runs (its median is reported)"
    )
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="datapipe-incremental-")
    raw = os.path.join(workdir, "raw")
    per = args.samples // args.files
    if not os.path.isdir(raw):
        os.makedirs(raw)
        for f in range(args.files):
            write_file(os.path.join(raw, f"f{f:03d}.parquet"), f * per, per, f)
    with open(os.path.join(workdir, "w3.yaml"), "w") as out:
        out.write(PIPELINE)
    store, scratch = os.path.join(workdir, "store"), os.path.join(workdir, "scratch")
    before = store + ".before"
    shutil.rmtree(store, ignore_errors=True)
    full = build(workdir, store, args.workers)
    total = full["summary"]["bytes"]
    print(
        f"full build: {full['seconds']:.1f} s, {total / 1e9:.2f} GB of shards, "
        f"{full['summary']['shards']} shards"
    )
    middle = os.path.join(raw, f"f{args.files // 2:03d}a.parquet")  # sorts between f050 and f051
    changes = [
        ("added", lambda: write_file(middle, args.samples, per, 999)),
        ("edited", lambda: write_file(middle, args.samples, per, 1000)),
        ("removed", lambda: os.remove(os.path.join(raw, f"f{args.files // 3:03d}.parquet"))),
    ]
    fulls, rows = [full["seconds"]], []
    for name, change in changes:
        change()
        shutil.rmtree(before, ignore_errors=True)
        # the store before the rebuild, for repeats
        subprocess.run(["cp", "-al", store, before], check=True)
        times = []
        for attempt in range(args.repeat):
            if attempt:  # the same rebuild again, from the same parent
                shutil.rmtree(store)
                subprocess.run(["cp", "-al", before, store], check=True)
            again = build(workdir, store, args.workers)
            times.append(again["seconds"])
        shutil.rmtree(scratch, ignore_errors=True)
        fresh = build(workdir, scratch, args.workers)
        fulls.append(fresh["seconds"])
        rows.append((name, sorted(times), again, fresh))
    shutil.rmtree(before, ignore_errors=True)
    base = statistics.median(fulls)
    print(
        "full builds (the first and the three from scratch): "
        f"{', '.join(f'{t:.1f}' for t in fulls)} s; "
        f"median {base:.1f} s"
    )
    for name, times, again, fresh in rows:
        inc = again["summary"]["incremental"]
        same = again["summary"]["version"] == fresh["summary"]["version"]
        median = statistics.median(times)
        print(
            f"{name}: rebuild {median:.2f} s median of {len(times)} "
            f"({times[0]:.2f}-{times[-1]:.2f}) = "
            f"{median / base:.1%} of the median full build "
            f"({times[0] / base:.1%}-{times[-1] / base:.1%}); "
            f"wrote {inc['shards']['bytes_written'] / 1e6:.0f} MB = "
            f"{inc['shards']['bytes_written'] / total:.1%} "
            f"of the full build's bytes; partitions {inc['partitions']}; shards "
            f"written {inc['shards']['written']}, "
            f"reused {inc['shards']['reused']}; source files {inc['source_files']}; "
            "same version as from "
            f"scratch: {same}; seconds {again['summary']['seconds']}"
        )
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
