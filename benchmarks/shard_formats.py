"""W1 (200,000 samples: key, int label, 1 KiB payload) written and read with datapipe's two formats.

A seed for the peer comparison of issue 6: datapipe only, one process, warm page cache.
Run: python -m benchmarks.shard_formats [--samples N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

from datapipe.formats.shards import open_shard, write_shard


def w1(n: int) -> list[dict]:
    rnd = random.Random(0)
    return [
        {"__key__": f"s{i:07d}", "cls": str(i % 10).encode(), "bin": rnd.randbytes(1024)}
        for i in range(n)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    samples = w1(args.samples)
    payload = sum(len(s["bin"]) + len(s["cls"]) for s in samples)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        print(
            f"{'format':10} {'write/s':>10} {'read idx/s':>11} {'scan/s':>10} {'disk/payload':>13}"
        )
        for ext in ("tar", "tfrecord"):
            path = os.path.join(tmp, f"w1.{ext}")
            t = time.perf_counter()
            write_shard(path, samples)
            write = time.perf_counter() - t
            timings = []
            for index in (True, False):
                t = time.perf_counter()
                with open_shard(path, index=index) as reader:
                    touched = sum(len(s["bin"]) for s in reader)  # touch every payload
                timings.append(time.perf_counter() - t)
                assert touched == 1024 * len(samples)
            n = len(samples)
            print(
                f"{ext:10} {n / write:>10,.0f} {n / timings[0]:>11,.0f} {n / timings[1]:>10,.0f} "
                f"{os.path.getsize(path) / payload:>12.2f}x"
            )


if __name__ == "__main__":
    main()
