"""``datapipe build`` end to end: a Parquet source of the workload into a fresh store, timed from
outside.

The wall time covers everything a user waits for: interpreter start, the Dask LocalCluster,
reading the Parquet row groups, the measuring pass, writing the shards and the commit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

from benchmarks.workloads import Data, Workload, generate, write_parquet

PIPELINE = """\
name: {name}
source: {{path: {name}.parquet, format: parquet}}
sample: {{key: key, fields: {{cls: label, bin: payload}}}}
shards: {{max_bytes: 64MB}}
"""


# The least any build on an embedded LocalCluster waits for, datapipe or not: a fresh interpreter
# starts the cluster, every worker has what reading Parquet into pandas needs imported, and the
# cluster stops. Workers fork from a forkserver that imports it all once (as datapipe's do; Dask's
# default spawns each, ~0.6 s more).
DASK_FLOOR = """
import multiprocessing
from multiprocessing import forkserver

import dask

PRELOAD = ["distributed", "pandas", "pyarrow.parquet"]
multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
forkserver.ensure_running()
from distributed import Client, LocalCluster

def imports():
    import pandas, pyarrow.parquet

with dask.config.set({{"distributed.worker.multiprocessing-method": "forkserver"}}), \\
        LocalCluster(
            n_workers={workers}, threads_per_worker=1, dashboard_address=None
        ) as cluster, \\
        Client(cluster) as client:
    client.run(imports)
"""


def prepare(data: Data, directory: str) -> str:
    """Write NAME.parquet and NAME.yaml into ``directory``; returns the pipeline file."""
    name = data.workload.name
    os.makedirs(directory, exist_ok=True)
    write_parquet(data, os.path.join(directory, f"{name}.parquet"))
    pipeline = os.path.join(directory, f"{name}.yaml")
    with open(pipeline, "w") as f:
        f.write(PIPELINE.format(name=name))
    return pipeline


def build(
    pipeline: str,
    store: str,
    workers: int,
    timeout: float = 3600,
    keep: bool = False,
    env: dict | None = None,
) -> dict:
    """Run ``python -m datapipe build PIPELINE --out STORE --workers N --json`` once; the store is
    removed after unless ``keep``."""
    shutil.rmtree(store, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "datapipe",
        "build",
        pipeline,
        "--out",
        store,
        "--workers",
        str(workers),
        "--json",
    ]
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    if not keep:
        shutil.rmtree(store, ignore_errors=True)
    return {"workers": workers, "seconds": seconds, "summary": summary}


def fixed_costs(
    workload: Workload, directory: str, workers: int, repeats: int = 3, timeout: float = 600
) -> dict:
    """Seconds (medians of ``repeats``) that do not depend on the data: ``datapipe build`` of a
    10-row Parquet file of the workload, and DASK_FLOOR, both with ``workers`` workers. The
    workload's samples over either is the most samples/s its build can reach end to end, however
    fast the passes."""
    tiny = Workload(f"{workload.name}-10-rows", 10, workload.payload, workload.seed)
    pipeline = prepare(generate(tiny), directory)
    builds = [
        build(pipeline, os.path.join(directory, "built"), workers, timeout)["seconds"]
        for _ in range(repeats)
    ]
    floors = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", DASK_FLOOR.format(workers=workers)],
            check=True,
            timeout=timeout,
            capture_output=True,
        )
        floors.append(time.perf_counter() - t)
    return {
        "workers": workers,
        "build_10_rows": sorted(builds)[len(builds) // 2],
        "dask_floor": sorted(floors)[len(floors) // 2],
        "runs": {"build_10_rows": builds, "dask_floor": floors},
    }
