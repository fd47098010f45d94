"""W3: builds at scale. 2,000,000 x 1 KiB + int label in Parquet (~2 GB), built four ways, and
MDSWriter beside them.

``python -m benchmarks.build_scale [--samples N] [--workdir DIR]`` (the bench venv, with
mosaicml-streaming) writes W3 as Parquet in 16 MB row groups (once, kept in DIR), then times, each
in a fresh process from outside: Mosaic's MDSWriter writing the same samples in one process, reading
them from the Parquet with pyarrow; ``datapipe build`` with 1 and with 2 embedded workers; and
``datapipe build --scheduler`` on a real ``dask scheduler`` with 2 ``dask worker`` processes this
benchmark starts. Prints samples/s, the ratios issue 17 sets targets for, and each build's peak
worker RSS; then the build-time model of ``benchmarks.build_model`` fitted to the 1- and 2-worker
builds (the runs are kept in DIR/runs.json: ``python -m benchmarks.build_model DIR/runs.json``
refits).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from benchmarks import build_model

MDS_SCRIPT = """
import sys, pyarrow.parquet as pq
from benchmarks.peers import MDS_COLUMNS, SHARD_BYTES, patch_torchvision
patch_torchvision()
from streaming import MDSWriter
writing = MDSWriter(
    out=sys.argv[2], columns=MDS_COLUMNS, size_limit=SHARD_BYTES, progress_bar=False
)
with writing as writer:
    for batch in pq.ParquetFile(sys.argv[1]).iter_batches(batch_size=8192):
        for key, label, payload in zip(*(batch.column(i).to_pylist() for i in range(3))):
            writer.write({"key": key, "cls": label, "bin": payload})
"""


def prepare(samples: int, directory: str) -> str:
    """W3 as DIR/w3.parquet (written chunk by chunk: 2M samples never sit in memory) and
    DIR/w3.yaml."""
    from benchmarks.building import PIPELINE
    from benchmarks.incremental import write_file

    os.makedirs(directory, exist_ok=True)
    path, pipeline = os.path.join(directory, "w3.parquet"), os.path.join(directory, "w3.yaml")
    if not os.path.exists(pipeline):
        write_file(path, 0, samples, 3)
        with open(pipeline, "w") as f:
            f.write(PIPELINE.format(name="w3"))
    return pipeline


def timed(cmd: list[str], cwd: str | None = None) -> tuple[float, str]:
    """Wall seconds of ``cmd`` and its stdout; an error names the command and its stderr."""
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def build(pipeline: str, store: str, *options: str) -> dict:
    """One `datapipe build` from outside: wall seconds and its summary."""
    shutil.rmtree(store, ignore_errors=True)
    seconds, out = timed(
        [sys.executable, "-m", "datapipe", "build", pipeline, "--out", store, "--json", *options]
    )
    shutil.rmtree(store, ignore_errors=True)
    return {"seconds": seconds, "summary": json.loads(out.strip().splitlines()[-1])}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def on_real_cluster(pipeline: str, store: str) -> dict:
    """The build on `dask scheduler` + 2 `dask worker` processes started here (not counted in its
    time)."""
    address = f"tcp://127.0.0.1:{_free_port()}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                address.rsplit(":", 1)[1],
                "--no-dashboard",
            ],
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        time.sleep(2)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    address,
                    "--nworkers",
                    "2",
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                ],
                stderr=subprocess.DEVNULL,
            )
        )
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
        return build(pipeline, store, "--scheduler", address)
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2_000_000)
    parser.add_argument(
        "--workdir", default=None, help="where W3 is written (kept); default: a temporary directory"
    )
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="datapipe-w3-")
    pipeline = prepare(args.samples, workdir)
    parquet = os.path.join(workdir, "w3.parquet")
    mds_out = os.path.join(workdir, "mds")
    shutil.rmtree(mds_out, ignore_errors=True)
    mds, _ = timed(
        [sys.executable, "-c", MDS_SCRIPT, parquet, mds_out],
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    shutil.rmtree(mds_out, ignore_errors=True)
    store = os.path.join(workdir, "store")
    runs = {
        "1 worker": build(pipeline, store, "--workers", "1"),
        "2 workers": build(pipeline, store, "--workers", "2"),
        "real cluster, 2 workers": on_real_cluster(pipeline, store),
    }
    n = args.samples
    print(
        f"W3: {n:,} samples x 1 KiB from Parquet; MDSWriter in one process: "
        f"{n / mds:,.0f} samples/s ({mds:.1f} s)"
    )
    for name, r in runs.items():
        peak = r["summary"].get("worker_peak_rss") or 0
        print(
            f"datapipe build, {name}: {n / r['seconds']:,.0f} samples/s ({r['seconds']:.1f} s), "
            f"{n / r['seconds'] * mds / n:.2f}x MDS; peak worker RSS {peak / 1e6:.0f} MB; ran on "
            f"{r['summary'].get('ran_on')}; seconds {r['summary'].get('seconds')}"
        )
    one, two, real = (
        runs[k]["seconds"] for k in ("1 worker", "2 workers", "real cluster, 2 workers")
    )
    print(
        f"2 workers / 1 worker: {one / two:.2f}x (target >= 1.7); real cluster "
        f"/ embedded: {two / real:.2f}x "
        f"(target >= 0.9); 2 workers / MDS: {mds / two:.2f}x (target >= 1.5)"
    )
    with open(os.path.join(workdir, "runs.json"), "w") as f:
        json.dump(
            {
                "samples": n,
                "source_bytes": os.path.getsize(parquet),
                "mds_seconds": mds,
                "runs": runs,
            },
            f,
        )
    print(
        build_model.report(
            *(build_model.measured(n, runs[k]["summary"]) for k in ("1 worker", "2 workers")),
            os.path.getsize(parquet),
        )
    )


if __name__ == "__main__":
    main()
