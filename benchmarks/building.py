"""``datapipe build`` end to end: a Parquet source of the workload into a fresh store, timed from outside.

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

from benchmarks.workloads import Data, write_parquet

PIPELINE = """\
name: {name}
source: {{path: {name}.parquet, format: parquet}}
sample: {{key: key, fields: {{cls: label, bin: payload}}}}
shards: {{max_bytes: 64MB}}
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


def build(pipeline: str, store: str, workers: int, timeout: float = 3600) -> dict:
    """Run ``python -m datapipe build PIPELINE --out STORE --workers N --json`` once; the store is removed after."""
    shutil.rmtree(store, ignore_errors=True)
    cmd = [sys.executable, "-m", "datapipe", "build", pipeline, "--out", store, "--workers", str(workers), "--json"]
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    shutil.rmtree(store, ignore_errors=True)
    return {"workers": workers, "seconds": seconds, "summary": summary}
