"""Near-duplicate removal (issue 33): datapipe's near_dedupe stage against datatrove's MinHash
deduplication on W5's documents with planted near-copies, side by side in one run; quality
(recall, precision, the curve against the S-curve) and documents per second.

    python -m benchmarks.near_run [--workdir DIR] [--quick] [--per-level N] [--out DIR]

In order: W5's JSONL (``benchmarks.text``, reused from ``DIR/w5``), the planted corpus
(``near_data``: W5's documents, then ``per_level`` copies at each of 0.95 ... 0.5 exact Jaccard),
the floor (signatures alone in one process), then ``rounds`` rounds of datapipe's build (2
workers) and datatrove's four stages (2 tasks), alternating; the quality from the last round.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

import numpy as np

from benchmarks import near_data, near_datatrove, near_ours, near_quality, text
from benchmarks.machine import machine
from benchmarks.near_corpus import Planted
from benchmarks.near_report import report
from benchmarks.text import text_workload

THRESHOLD = 0.8
BANDS, ROWS = 14, 8


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def candidates(corpus: Planted, limit: int = 3000, seed: int = 0) -> dict:
    """The candidate pairs LSH makes of the corpus (bands 14 x rows 8), a sample of at most
    ``limit`` of them with their exact similarity by brute force and their estimate."""
    from datapipe.builder.near_dedupe.minhash import HashFamily, signatures, similarity
    from datapipe.builder.near_dedupe.tasks import band_frame, bucket_pairs
    from datapipe.builder.removals import Signed

    sig = signatures(corpus.texts, 5, HashFamily(0, 112))
    labels = np.zeros(len(sig), dtype=str)  # one block, numbered 0 on: a document's index
    pairs = bucket_pairs(band_frame(Signed(sig, labels), 0, BANDS, ROWS)).to_numpy(np.int64)
    rng = random.Random(seed)
    picked = sorted(rng.sample(range(len(pairs)), min(limit, len(pairs))))
    rows = []
    for a, b in pairs[picked].tolist():
        exact = near_data.exact_similarity(corpus.texts[a], corpus.texts[b])
        estimate = float(similarity(sig[[a]], sig[[b]])[0])
        rows.append((exact, estimate))
    by_bin = []
    for lo in near_quality.BINS.tolist():
        inside = [e >= THRESHOLD for x, e in rows if lo <= x < lo + 0.05]
        by_bin.append(
            {"from": lo, "pairs": len(inside), "edge": float(np.mean(inside)) if inside else None}
        )
    return {"pairs": len(pairs), "sampled": len(rows), "by_bin": by_bin}


def run(args: argparse.Namespace) -> dict:
    workdir = args.workdir
    w = text_workload(args.quick)
    jsonl = os.path.join(workdir, w.name, "jsonl")
    stats = text.generate(w, jsonl)
    originals = text.texts(jsonl)
    log(f"{w.describe()}: {len(originals):,} documents")
    corpus = near_data.planted_corpus(originals, args.per_level)
    near_jsonl = os.path.join(workdir, "near", "jsonl")
    shutil.rmtree(near_jsonl, ignore_errors=True)
    near_data.write_corpus(corpus, near_jsonl)
    documents = len(corpus.texts)
    log(f"planted {len(corpus.copies)} copies: {documents:,} documents")
    floor = near_ours.floor(corpus.texts)
    log(f"floor: signatures in one process {floor:.1f} s ({documents / floor:,.0f} docs/s)")
    ours, loose, peers = [], [], []
    for r in range(args.rounds):
        for verify, runs in ((True, ours), (False, loose)):
            scratch = os.path.join(workdir, "near", f"ours-{r}-{verify}")
            shutil.rmtree(scratch, ignore_errors=True)
            runs.append(near_ours.build(near_jsonl, scratch, THRESHOLD, verify=verify))
            o = runs[-1]
            log(
                f"round {r + 1}: datapipe (verify {verify}) {o['seconds']:.1f} s, "
                f"removed {len(o['removed'])}"
            )
        scratch = os.path.join(workdir, "near", f"datatrove-{r}")
        shutil.rmtree(scratch, ignore_errors=True)
        peers.append(near_datatrove.run_datatrove(near_jsonl, scratch, 2, BANDS, ROWS, 5))
        p = peers[-1]
        log(f"round {r + 1}: datatrove {p['seconds']:.1f} s, removed {len(p['removed'])}")
    gone_ours = set(ours[-1]["removed"])
    gone_loose = set(loose[-1]["removed"])
    gone_peer = set(peers[-1]["removed"])
    tools = (
        ("datapipe", gone_ours),
        ("datapipe verify: false", gone_loose),
        ("datatrove", gone_peer),
    )
    return {
        "machine": machine(),
        "workload": {
            "describe": w.describe(),
            "documents": documents,
            "copies": len(corpus.copies),
            "text_bytes": stats.get("bytes"),
        },
        "floor_seconds": floor,
        "datapipe_seconds": [o["seconds"] for o in ours],
        "datapipe_passes": ours[-1]["passes"],
        "unverified_seconds": [o["seconds"] for o in loose],
        "datatrove_seconds": [p["seconds"] for p in peers],
        "datatrove_stages": peers[-1].get("seconds_per_stage"),
        "removed": {tool: len(gone) for tool, gone in tools},
        "recall": {
            tool: {str(t): near_quality.recall(corpus, gone, t) for t in (0.9, 0.85, 0.8)}
            for tool, gone in tools
        },
        "precision": {
            "datapipe": near_quality.precision(corpus, ours[-1]["removed"], THRESHOLD),
            "datapipe verify: false": near_quality.precision(
                corpus, loose[-1]["removed"], THRESHOLD
            ),
        },
        "planted_precision": {
            tool: near_quality.planted_precision(corpus, gone, THRESHOLD) for tool, gone in tools
        },
        "curve": {tool: near_quality.curve(corpus, gone) for tool, gone in tools},
        "candidates": candidates(corpus),
        "non_pairs": near_quality.non_pairs(corpus),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--quick", action="store_true", help="every 10th file of W5")
    parser.add_argument("--per-level", type=int, default=100, help="planted copies a level")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    temporary = args.workdir is None
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="near-")
    try:
        result = run(args)
        out = args.out or args.workdir
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "results-near.json"), "w") as f:
            json.dump(result, f, indent=1)
        with open(os.path.join(out, "results-near.md"), "w") as f:
            f.write(report(result))
        print(report(result))
    finally:
        if temporary:
            shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
