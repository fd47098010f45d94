"""A model of `datapipe build` time on N workers, fitted to W3's 1- and 2-worker builds (issue 17).

The terms, each fitted or measured here:
- fixed: the build's ``start`` (interpreter, cluster or client) and the workers' first imports;
- per sample: the CPU seconds of the measure and write passes on one worker (the 1-worker build);
- exchange: what the write pass pays per byte of shard data that comes from a partition on another
  worker (a fraction (N-1)/N of it), fitted to the 2-worker build's write pass;
- scheduler: the seconds per task of Dask's scheduler (measured with no-op tasks; it is one process,
  so its share does not shrink with N);
- the client's plan: key-hash deduplication (``np.unique`` over 16-byte rows) and the per-sample
  arrays;
- the commit on S3: every shard and index is a server-side copy, MOVE_THREADS at a time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

ROW_GROUP = 16 << 20  # source bytes per partition, as W3 is written
SHARD = 64 << 20
# size, key hash, output position, shard number: held by the client
PLAN_BYTES_PER_SAMPLE = 8 + 16 + 8 + 8
S3_COPY_SECONDS = 1.0  # assumed, not measured: a 64 MB server-side CopyObject in one region
MOVE_THREADS = 16  # datapipe.versioning.writer.MOVE_THREADS


@dataclass(frozen=True)
class Build:
    """One measured build: samples, shard bytes, and its summary's seconds."""

    samples: int
    shard_bytes: int
    start: float
    measure: float
    write: float


@dataclass(frozen=True)
class Fit:
    """The fitted per-sample and per-byte costs."""

    measure_per_sample: float  # CPU seconds on one worker
    write_per_sample: float
    measure_efficiency: float  # 2-worker speed-up of the measure pass over 2
    exchange_per_byte: float  # seconds per shard byte that crosses between workers
    task_seconds: float  # scheduler seconds per task
    unique_per_row: float  # client seconds per key hash in np.unique, at the measured size


def measured(samples: int, summary: dict) -> Build:
    """A Build from `datapipe build --json`'s summary."""
    sec = summary["seconds"]
    return Build(
        samples, summary["bytes"], sec["start"], sec["clean and measure"], sec["write shards"]
    )


def fit(one: Build, two: Build, task_seconds: float, unique_per_row: float) -> Fit:
    """The costs that make the model give ``one`` and ``two`` exactly."""
    s = one.samples
    exchange = max(0.0, (2 * two.write - one.write) / (one.shard_bytes / 2))
    return Fit(
        one.measure / s,
        one.write / s,
        one.measure / (2 * two.measure),
        exchange,
        task_seconds,
        unique_per_row,
    )


def predict(
    f: Fit,
    workers: int,
    samples: int,
    bytes_per_sample: float,
    source_per_sample: float,
    start: float,
    shuffled: bool = False,
) -> dict[str, float]:
    """Seconds of each term for ``samples`` on ``workers``, and the tasks and client memory they
    imply."""
    partitions = math.ceil(samples * source_per_sample / ROW_GROUP)
    shards = math.ceil(samples * bytes_per_sample / SHARD)
    # a shuffle spreads each shard over all
    pieces = partitions * shards if shuffled else partitions + shards
    tasks = 2 * partitions + pieces + shards
    # as much lost per doubling as from 1 to 2
    efficiency = f.measure_efficiency ** math.log2(workers)
    measure = samples * f.measure_per_sample / (workers * efficiency)
    crossing = samples * bytes_per_sample * (workers - 1) / workers
    write = (samples * f.write_per_sample + crossing * f.exchange_per_byte) / workers
    scheduler = tasks * f.task_seconds
    plan = samples * f.unique_per_row * math.log2(samples) / math.log2(2_000_000)
    commit = math.ceil(2 * shards / MOVE_THREADS) * S3_COPY_SECONDS
    return {
        "start": start,
        "measure": max(measure, partitions * f.task_seconds),
        "write": max(write, scheduler),
        "plan": plan,
        "commit_s3": commit,
        "tasks": tasks,
        "client_gb": samples * PLAN_BYTES_PER_SAMPLE / 1e9,
        "graph_gb": samples * 16 / 1e9,
    }


def task_seconds(tasks: int = 4000) -> float:
    """Seconds per task of a pass of no-op tasks on an embedded LocalCluster of 2 workers."""
    from dask import delayed
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        c.gather(c.compute([delayed(int, pure=False)(i) for i in range(100)]))  # warm
        t = time.perf_counter()
        c.gather(c.compute([delayed(int, pure=False)(i) for i in range(tasks)]))
        return (time.perf_counter() - t) / tasks


def unique_seconds(rows: int = 2_000_000) -> float:
    """Seconds per row of the client's key deduplication (``shard_plan.first_occurrences``) at
    ``rows``."""
    from datapipe.builder.shard_plan import first_occurrences

    hashes = (
        np.random.default_rng(0)
        .integers(0, 2**63, size=(rows, 2), dtype=np.int64)
        .astype(np.uint64)
    )
    t = time.perf_counter()
    first_occurrences([hashes])
    return (time.perf_counter() - t) / rows


def report(one: Build, two: Build, source_bytes: int) -> str:
    """The fit and its prediction for 100 workers and 1 billion samples, as text."""
    f = fit(one, two, task_seconds(), unique_seconds())
    per_sample, per_source = one.shard_bytes / one.samples, source_bytes / one.samples
    lines = [
        f"fit: measure {f.measure_per_sample * 1e6:.2f} us/sample, write "
        f"{f.write_per_sample * 1e6:.2f} "
        "us/sample (1 worker); measure pass 2-worker efficiency "
        f"{f.measure_efficiency:.2f}; exchange "
        f"{f.exchange_per_byte * 1e9:.2f} ns per crossing byte; scheduler "
        f"{f.task_seconds * 1e6:.0f} us/task; "
        f"key dedupe {f.unique_per_row * 1e9:.0f} ns/row"
    ]
    for workers, samples in ((2, one.samples), (100, 1_000_000_000)):
        for shuffled in (False, True):
            p = predict(f, workers, samples, per_sample, per_source, two.start, shuffled)
            total = p["start"] + p["measure"] + p["write"] + p["plan"]
            lines.append(
                f"{workers} workers, {samples:,} samples{' shuffled' if shuffled else ''}: "
                f"{total:,.0f} s + S3 commit {p['commit_s3']:,.0f} s (measure "
                f"{p['measure']:,.0f}, write "
                f"{p['write']:,.0f}, client plan {p['plan']:,.0f}); {p['tasks']:,.0f} "
                "tasks; client "
                f"{p['client_gb']:,.1f} GB of plan arrays, {p['graph_gb']:,.1f} GB of "
                "positions in the "
                "write graph"
            )
    return "\n".join(lines)


def main() -> None:
    import json
    import sys

    with open(sys.argv[1]) as f:
        runs = json.load(f)
    n = runs["samples"]
    print(
        report(
            measured(n, runs["runs"]["1 worker"]["summary"]),
            measured(n, runs["runs"]["2 workers"]["summary"]),
            runs["source_bytes"],
        )
    )


if __name__ == "__main__":
    main()
