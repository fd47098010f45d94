"""W6: tokens delivered per second into the training process, as packed rows of W5's token
version, datapipe against Megatron-Core's GPTDataset, LitData's TokensLoader and a numpy floor
(issue 32).

    python -m benchmarks.pack_run [--workdir DIR] [--quick] [--rounds N] [--rows N] [--out DIR]
    python -m benchmarks.run --workloads w6 [--quick] [--workdir DIR]    # the same, from the run

In order: W5's JSONL parts and tokenizers (``benchmarks.text``, ``benchmarks.bpe``: reused from
``DIR/w5`` when there), W5's token version (``pack_data``: ``datapipe build``, kept in
``DIR/w6/built``), LitData's chunks of its tokens, then ``rounds`` rounds of every read, each in a
fresh interpreter (``benchmarks.pack_measure``) after the files are read once (a warm page cache),
tool after tool within a round so that every tool's median comes from the same minutes; and once a
round, the plan making (``pack_ours.plans``). Rows of 4096 tokens, batches of 8, shuffled with
seed 0, in one process and with 2 DataLoader workers; ``--rows`` caps the rows of each read
(default: one whole epoch; ``--quick``: every 10th file of W5, 2,000 rows a read, one round).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks import bpe, measure, pack_data, pack_ours, text
from benchmarks.text import TextWorkload, text_workload

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENGTH = 4096
BATCH = 8
WORKERS = (0, 2)  # num_workers: in the training process, and 2 DataLoader workers
QUICK_ROWS = 2000  # of the 2,410 rows an epoch of W5's every 10th file gives


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def child(spec: dict, timeout: float) -> dict:
    """``benchmarks.pack_measure`` of ``spec`` in a fresh interpreter: its result, or {"error"}."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, "-m", "benchmarks.pack_measure", json.dumps(spec)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    found = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode != 0 or not found:
        return {"error": f"exit {done.returncode}: {(done.stderr or done.stdout)[-2000:]}"}
    return json.loads(found[-1][len("RESULT ") :])


def reads(data: dict, lit: dict, scratch: str, epoch_rows: int, rows: int | None) -> dict:
    """Every read of a round, by key ``TOOL/WORKERS``: its spec for ``pack_measure``."""
    base = {"length": LENGTH, "batch": BATCH, "rows": rows}
    url = data["url"]
    out = {}
    for w in WORKERS:
        ours = {**base, "tool": "datapipe", "url": url, "workers": w}
        out[f"concat/{w}"] = {**ours, "mode": "concat"}
        out[f"best-fit/{w}"] = {**ours, "mode": "best-fit"}
        out[f"megatron/{w}"] = {
            **base,
            "tool": "megatron",
            "shards": data["shards"],
            "eos": data["eos"],
            "scratch": scratch,
            "workers": w,
        }
        out[f"litdata/{w}"] = {**base, "tool": "litdata", "litdata": lit["dir"], "workers": w}
        out[f"mix/{w}"] = {
            **ours,
            "tool": "datapipe-mix",
            "mode": "concat",
            "sources": dict.fromkeys(pack_ours.MIX_WEIGHTS, url),
            "weights": pack_ours.MIX_WEIGHTS,
            "epoch_rows": epoch_rows,
        }
    out["floor/0"] = {
        **base,
        "tool": "floor",
        "shards": data["shards"],
        "dtype": data["dtype"],
        "workers": 0,
    }
    return out


def _files(spec: dict, data: dict) -> list[str]:
    """The files a read maps: LitData's chunks, else the version's shards and companions."""
    if spec["tool"] == "litdata":
        return measure.files_under(spec["litdata"])
    return measure.files_under(os.path.dirname(data["shards"][0]))


def _log_read(key: str, r: dict) -> None:
    if "error" in r:
        log(f"  {key}: failed: {r['error'].strip().splitlines()[-1][:300]}")
        return
    rate = r["rows_after_first"] / r["read_seconds"] if r["read_seconds"] else 0.0
    log(
        f"  {key}: {rate:,.0f} rows/s ({rate * LENGTH / 1e6:,.1f}M tokens/s), {r['rows']:,} "
        f"rows; imports {r['import_seconds']:.2f} s, first batch {r['start_seconds']:.2f} s"
    )


def measure_rounds(data: dict, lit: dict, workdir: str, timeout: float, rounds: int, rows) -> dict:
    """{key: [one result a round]} for every read, and "plans": [one a round]; kept in
    ``WORKDIR/runs.json`` after every measurement."""
    epoch_rows = pack_ours.rows_of(data["url"], LENGTH)
    specs = reads(data, lit, os.path.join(workdir, "scratch"), epoch_rows, rows)
    runs: dict = {key: [] for key in specs} | {"plans": []}
    for i in range(rounds):
        log(f"  round {i + 1} of {rounds}")
        for key, spec in specs.items():
            measure.warm(_files(spec, data))
            runs[key].append(child(spec, timeout))
            _log_read(key, runs[key][-1])
            with open(os.path.join(workdir, "runs.json"), "w") as f:
                json.dump(runs, f, indent=1)
        plan = child({"tool": "plans", "url": data["url"], "length": LENGTH}, timeout)
        runs["plans"].append(plan)
        shutil.rmtree(os.path.join(workdir, "scratch"), ignore_errors=True)
    return {"epoch_rows": epoch_rows, "runs": runs}


def run_w6(w: TextWorkload, workdir: str, timeout: float, rounds: int, rows: int | None) -> dict:
    """W6 end to end under ``workdir`` (W5's text in ``workdir/W5NAME``, W6's files in
    ``workdir/w6[-quick]``); the result for ``benchmarks.pack_report``."""
    log(f"w6: packed rows of {w.describe()}")
    w5 = os.path.join(workdir, w.name)
    w6 = os.path.join(workdir, w.name.replace("w5", "w6"))
    jsonl = os.path.join(w5, "jsonl")
    stats = text.generate(w, jsonl)
    toks = bpe.tokenizers_for(stats["sha256"], jsonl, os.path.join(w5, "bpe"), log)
    tokenizer = toks[pack_data.TOKENIZER]
    data = pack_data.version(w6, jsonl, stats["sha256"], tokenizer, timeout, log)
    log(
        f"  version {data['version'][:12]}: {data['documents']:,} documents, "
        f"{data['tokens']:,} tokens in {len(data['shards'])} shard(s)"
    )
    lit = pack_data.litdata_chunks(w6, data, timeout, log)
    result = {
        "kind": "packed",
        "workload": "w6",
        "describe": f"W6: packed rows of {w.describe()}",
        "text": stats,
        "tokenizer": {pack_data.TOKENIZER: tokenizer},
        "length": LENGTH,
        "batch": BATCH,
        "rows_cap": rows,
        "data": data,
        "litdata": lit,
    }
    result.update(measure_rounds(data, lit, w6, timeout, rounds, rows))
    return result


def settings(quick: bool) -> tuple[int, int | None]:
    """(rounds, the most rows a read takes): (3, an epoch), or with ``quick`` (1, QUICK_ROWS)."""
    return (1, QUICK_ROWS) if quick else (3, None)


def main(argv: list[str] | None = None) -> None:
    from benchmarks import report
    from benchmarks.machine import machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="where W5's text and W6's files go (kept) [a temp dir]")
    parser.add_argument("--quick", action="store_true", help="every 10th file, 2,000 rows a read")
    parser.add_argument("--rounds", type=int, help="rounds of every read [3; 1 with --quick]")
    parser.add_argument("--rows", type=int, help="rows a read at most [an epoch; 2,000 --quick]")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a measurement")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)
    rounds, rows = settings(args.quick)
    rounds, rows = args.rounds or rounds, args.rows or rows
    start = time.perf_counter()
    results = {"quick": args.quick, "machine": machine(), "workloads": {}}
    tmp = None if args.workdir else tempfile.mkdtemp(prefix="datapipe-w6-")
    try:
        results["workloads"]["w6"] = run_w6(
            text_workload(args.quick), args.workdir or tmp, args.timeout, rounds, rows
        )
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    results["machine"]["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results["seconds"] = time.perf_counter() - start
    print(report.markdown(results))
    paths = report.save(results, args.out, "results-w6")
    log(f"done in {results['seconds']:.0f}s; wrote {', '.join(paths.values())}")


if __name__ == "__main__":
    main()
