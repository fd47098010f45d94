"""How fast `datapipe serve` answers on a large store (issue 20: under 300 ms a page with 100,000
samples in 1,000 shards): python -m benchmarks.serve_pages [--samples N] [--shards N] [--workdir
DIR].

It writes a store with the library's writer (small PNGs, a class, a JSON field), then a second
version that shares all but one shard and adds one (an incremental build), and times each page
through the ASGI app in process (no network): the first answer (cold caches) and the median of the
next ones.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def _png(seed: int) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8), "RGB").save(out, "PNG")
    return out.getvalue()


def build(root: Path, samples: int, shards: int):
    from datapipe.formats.registry import get_format
    from datapipe.versioning.manifest import Manifest
    from datapipe.versioning.store import Store

    store = Store(str(root))
    fmt = get_format("webdataset")
    images = [_png(i) for i in range(64)]
    per = samples // shards

    def sample(i: int) -> dict:
        return {
            "__key__": f"s{i:07d}",
            "png": images[i % 64],
            "cls": str(i % 10).encode(),
            "meta": json.dumps({"i": i}).encode(),
        }

    fields = {"png": "bytes", "cls": "int", "meta": "json"}
    writer = store.begin("big")
    entries = [
        writer.write_shard(s, (sample(s * per + j) for j in range(per)), fmt) for s in range(shards)
    ]
    first = writer.commit(
        Manifest(name="big", shard_format="webdataset", fields=fields, shards=tuple(entries))
    )
    writer = store.begin("big")
    kept = [writer.share_shard(e, first.version) for e in entries[1:]]
    new = writer.write_shard(shards, (sample(samples + j) for j in range(per)), fmt)
    writer.commit(
        Manifest(
            name="big",
            shard_format="webdataset",
            fields=fields,
            shards=(*kept, new),
            parent=first.version,
        )
    )
    return store


def main() -> None:
    """Build the store, time the pages, print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    from starlette.testclient import TestClient

    from datapipe.serve import create_app

    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        started = time.perf_counter()
        store = build(Path(tmp) / "store", args.samples, args.shards)
        took = time.perf_counter() - started
        print(f"store: {args.samples} samples in {args.shards} shards, written in {took:.1f} s")
        v = store.resolve("big", "latest")
        base = f"/d/big/v/{v}"
        pages = {
            "store": "/",
            "dataset (log)": "/d/big",
            "version": base,
            "samples": base + "/samples",
            "samples, last page": base + f"/samples?page={args.samples // 48 - 1}",
            "key search": base + "/samples?q=s00999",
            "sample": base + f"/s/{args.shards // 2}/3",
            "thumbnail": base + f"/s/{args.shards // 2}/3/png/thumb",
            "diff": "/d/big/diff",
        }
        with TestClient(create_app(store)) as client:
            print(f"{'page':22} {'first ms':>9} {'median ms':>10}")
            for name, url in pages.items():
                times = []
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    answer = client.get(url)
                    times.append((time.perf_counter() - t) * 1000)
                    assert answer.status_code == 200, (url, answer.text[:300])
                print(f"{name:22} {times[0]:9.1f} {statistics.median(times[1:]):10.1f}")


if __name__ == "__main__":
    main()
