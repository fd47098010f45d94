"""Loader throughput from an S3 server on loopback (moto), cold and warm cache, next to local disk.

    python -m benchmarks.s3_loader [--samples 50000] [--payload 1024]

Writes one dataset both to a local store and to s3://bench/store on a moto server started
here, then times one epoch of datapipe.Loader (batch 256, no shuffle, one process and two
DataLoader workers) from local disk, from S3 with an empty cache, from S3 again with the
cache warm, and from S3 through a cache limited to a few shards (``--limit-shards``), which
evicts shards during the epoch and so downloads everything again every epoch. Not a test: it
prints samples/s.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time

import numpy as np

import datapipe
from datapipe.formats.registry import get_format
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store


def write(store: Store, samples: list[dict], per_shard: int) -> None:
    fmt = get_format("webdataset")
    writer = store.begin("bench")
    entries = [
        writer.write_shard(i, samples[s : s + per_shard], fmt)
        for i, s in enumerate(range(0, len(samples), per_shard))
    ]
    writer.commit(
        Manifest(
            name="bench",
            shard_format="webdataset",
            fields={"cls": "int", "bin": "bytes"},
            shards=tuple(entries),
        )
    )


def epoch(url: str, workers: int, cache_dir: str | None, cache_limit: int | None = None) -> float:
    loader = datapipe.Loader(
        url,
        batch_size=256,
        num_workers=workers,
        shuffle=False,
        cache_dir=cache_dir,
        cache_limit=cache_limit,
        decode={"bin": "ragged"},
    )
    start, n = time.perf_counter(), 0
    for batch in loader:
        n += len(batch["__key__"])
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--payload", type=int, default=1024)
    parser.add_argument(
        "--limit-shards", type=int, default=6, help="cache limit of the bounded run, in shards"
    )
    args = parser.parse_args()
    import torch  # noqa: F401 - imported before timing: the loader imports it on its first epoch

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL_S3=f"http://{host}:{port}",
    )
    boto3.client("s3").create_bucket(Bucket="bench")
    rng = np.random.default_rng(0)
    samples = [
        {"__key__": f"s{i:07d}", "cls": str(i % 10).encode(), "bin": rng.bytes(args.payload)}
        for i in range(args.samples)
    ]
    per_shard = max(1, (32 << 20) // (args.payload + 1536))
    work = tempfile.mkdtemp(prefix="datapipe-s3-bench-")
    try:
        write(Store(f"{work}/local"), samples, per_shard)
        write(Store("s3://bench/store"), samples, per_shard)
        rows = []
        for workers in (0, 2):
            cache = f"{work}/cache-{workers}"
            local = epoch(f"{work}/local/bench", workers, None)
            cold = epoch("s3://bench/store/bench", workers, cache)
            warm = epoch("s3://bench/store/bench", workers, cache)
            limit = args.limit_shards * per_shard * (args.payload + 1536)
            # the first epoch fills it
            epoch("s3://bench/store/bench", workers, f"{cache}-bounded", limit)
            bounded = epoch("s3://bench/store/bench", workers, f"{cache}-bounded", limit)
            rows.append((workers, local, cold, warm, bounded))
        print(
            f"{args.samples} samples x {args.payload} B, batch 256, moto S3 server "
            "on 127.0.0.1; bounded: "
            f"cache_limit of {args.limit_shards} shards"
        )
        print(
            f"{'workers':>8} {'local disk':>12} {'S3 cold':>12} {'S3 warm':>12} "
            f"{'S3 bounded':>12}   (samples/s)"
        )
        for workers, local, cold, warm, bounded in rows:
            print(f"{workers:>8} {local:>12,.0f} {cold:>12,.0f} {warm:>12,.0f} {bounded:>12,.0f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        server.stop()


if __name__ == "__main__":
    main()
