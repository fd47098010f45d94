"""Mixing and the audit: W1 read as one dataset vs split in two and mixed 50/50; the audit of 10M
samples.

``python -m benchmarks.mixing [--rounds 5] [--quick] [--workdir DIR]`` writes W1 with datapipe as
one dataset and as its two halves (two datasets), then reads one epoch of each, shuffled, in a fresh
process per measurement, alternating single and mix for ``--rounds`` rounds, with num_workers 0 and
2. Prints samples/s (median and range) and the ratio mix / single. Then it times ``datapipe.audit``
over a 10,000,000-sample dataset (10,000 shards of 1,000: only the manifest is read, as for a real
one) for 3 epochs with two resumes (one elastic), batch 256, 8 ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

WORKERS = (0, 2)


def ensure(workdir: str, quick: bool) -> dict[str, str]:
    """W1 as one dataset (``single``) and as halves ``a`` and ``b``, written once into
    ``workdir``."""
    from benchmarks import ours
    from benchmarks.workloads import Data, generate, workloads

    outs = {k: os.path.join(workdir, k) for k in ("single", "a", "b")}
    if not os.path.exists(os.path.join(workdir, "complete")):
        data = generate(workloads(quick)[0])
        half = len(data.samples) // 2
        ours.write(data, outs["single"])
        ours.write(Data(data.workload, data.samples[:half], data.labels[:half]), outs["a"])
        ours.write(Data(data.workload, data.samples[half:], data.labels[half:]), outs["b"])
        open(os.path.join(workdir, "complete"), "w").close()
    return outs


def one(kind: str, outs: dict[str, str], workers: int) -> float:
    """Samples/s of one shuffled epoch (after a first one that pays the imports and page cache),
    here."""
    import datapipe
    from benchmarks import ours

    def loader() -> datapipe.Loader:
        data = (
            ours.url(outs["single"])
            if kind == "single"
            else datapipe.mix(
                {"a": ours.url(outs["a"]), "b": ours.url(outs["b"])}, weights={"a": 0.5, "b": 0.5}
            )
        )
        return datapipe.Loader(
            data, batch_size=ours.BATCH, num_workers=workers, decode={"bin": "ragged"}
        )

    rate = 0.0
    for _ in range(2):
        start = time.perf_counter()
        samples = sum(ours._touch_ragged(batch["bin"])[0] for batch in loader())
        rate = samples / (time.perf_counter() - start)
    return rate


def audit_seconds() -> dict:
    """Seconds ``datapipe.audit`` takes over 10M samples, 3 epochs, two resumes."""
    from datapipe.loader.audit import audit
    from datapipe.loader.dataset import Dataset
    from datapipe.versioning.manifest import Manifest, ShardEntry
    from datapipe.versioning.store import Store

    shards = tuple(
        ShardEntry(f"shard-{i:06d}.tar", 1000, 1 << 20, "0" * 64, f"shard-{i:06d}.idx", 1, "0" * 64)
        for i in range(10_000)
    )
    manifest = Manifest(
        name="ten-million",
        shard_format="webdataset",
        fields={"bin": "bytes"},
        shards=shards,
        version="f" * 64,
    )
    data = Dataset(Store(tempfile.mkdtemp(prefix="datapipe-audit-")), "ten-million", manifest)
    start = time.perf_counter()
    report = audit(data, 256, 8, seed=0, epochs=3, resumes=["6000:8", "9000:6"])
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "ok": report.ok,
        "samples": len(data),
        "epochs": 3,
        "delivered": [e.samples for e in report.epochs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a tenth of W1")
    parser.add_argument("--workdir", default=None)
    parser.add_argument(
        "--one", nargs=3, metavar=("KIND", "WORKDIR", "WORKERS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.one:
        outs = {k: os.path.join(args.one[1], k) for k in ("single", "a", "b")}
        print(json.dumps(one(args.one[0], outs, int(args.one[2]))))
        return
    workdir = args.workdir or tempfile.mkdtemp(prefix="datapipe-mixing-")
    ensure(workdir, args.quick)
    rates: dict[tuple[str, int], list[float]] = {
        (k, w): [] for k in ("single", "mix") for w in WORKERS
    }
    for _ in range(args.rounds):
        for workers in WORKERS:
            for kind in ("single", "mix"):
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "benchmarks.mixing",
                        "--one",
                        kind,
                        workdir,
                        str(workers),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                rates[(kind, workers)].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        f"{'workers':>7} {'single samples/s':>22} {'mix 50/50 samples/s':>22} {'mix / single':>14}"
    )
    for workers in WORKERS:
        single, mixed = rates[("single", workers)], rates[("mix", workers)]
        ratios = [m / s for m, s in zip(mixed, single, strict=True)]
        print(
            f"{workers:>7} {statistics.median(single):>12,.0f} "
            f"({min(single):,.0f}-{max(single):,.0f})"
            f" {statistics.median(mixed):>12,.0f} ({min(mixed):,.0f}-{max(mixed):,.0f})"
            f" {statistics.median(ratios):>8.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        )
    result = audit_seconds()
    print(
        f"audit of {result['samples']:,} samples, 3 epochs, resumes 6000:8 and 9000:6: "
        f"{result['seconds']:.1f} s, ok={result['ok']}"
    )


if __name__ == "__main__":
    main()
