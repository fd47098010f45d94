"""The near-duplicate workload's datapipe side: ``datapipe build`` of a pipeline with only a
near_dedupe stage on 2 workers (a fresh process, its embedded cluster counted), what it removed
and why; and the floor, the signatures alone in one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

PIPELINE = """\
name: near
source: {{path: {jsonl}/*.jsonl, format: jsonl}}
stages:
  - near_dedupe:
      {{field: text, threshold: {threshold}, shingle: 5, bands: 14, rows: 8, verify: {verify}}}
sample: {{key: id, fields: {{text: text}}}}
shards: {{format: webdataset, max_bytes: 64MB}}
"""


def build(
    jsonl: str, workdir: str, threshold: float = 0.8, workers: int = 2, verify: bool = True
) -> dict:
    """Seconds of the build's command, its own pass times, and the removed ids with reasons
    (``verify``: the stage's, false taking every candidate pair as a duplicate)."""
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "near.yaml")
    with open(path, "w") as f:
        flag = "true" if verify else "false"
        f.write(PIPELINE.format(jsonl=os.path.abspath(jsonl), threshold=threshold, verify=flag))
    store = os.path.join(workdir, "store")
    cmd = [sys.executable, "-m", "datapipe", "build", path, "--out", store]
    cmd += ["--workers", str(workers), "--no-dashboard", "--json"]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"datapipe build failed: {done.stderr[-3000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "seconds": seconds,
        "passes": summary.get("seconds", {}),
        "removed": removed(store, summary["url"]),
        "samples": summary["samples"],
    }


def removed(store: str, url: str) -> dict[str, str]:
    """id -> reason of every document the version's near_dedupe stage quarantined."""
    from datapipe.versioning.rejected import read_rows
    from datapipe.versioning.store import open_dataset_url

    store_obj, name, manifest = open_dataset_url(url)
    if not manifest.rejected:
        return {}
    path = store_obj.path(name, "versions", manifest.version, manifest.rejected)
    return {
        json.loads(r["data"])["id"]: r["reason"]
        for r in read_rows(store_obj, path)
        if r["stage"].endswith(".near_dedupe")
    }


def floor(texts: list[str]) -> float:
    """Seconds to sign ``texts`` (shingle hashes, the min over 112 functions) in one process."""
    from datapipe.builder.near_dedupe.minhash import HashFamily, signatures

    start = time.perf_counter()
    signatures(texts, 5, HashFamily(0, 112))
    return time.perf_counter() - start
