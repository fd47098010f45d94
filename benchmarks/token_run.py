"""W5 in ``benchmarks.run`` (``--workloads w5``): make the text, train the two tokenizers, measure
the one-thread floor and the peers, each on the same documents with the same tokenizer (issue 31).

In order: W5's JSONL parts (``benchmarks.text``, reused when the listing matches), the tokenizers
(``benchmarks.bpe``, reused when their spec matches), which environment makes ``encode_batch`` one
thread (``token_floor.ENVS`` on the first ``THREAD_CHECK_BYTES`` of text with the 50,000-id
tokenizer), then ``rounds`` rounds of: for each tokenizer, the floor on every document
(``token_floor``, one thread) and each peer (``token_peers``, 2 workers), each in a fresh process,
so that every tool's figures come from the same minutes. ``datapipe build`` (``token_ours``) runs
once the tokenize stage exists; until then its row says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from benchmarks import bpe, text, token_floor, token_ours
from benchmarks.text import TextWorkload
from benchmarks.token_floor import ENVS, KNOBS, ONE_THREAD
from benchmarks.token_peers import PEERS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THREAD_CHECK_BYTES = 30 * 10**6


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _env() -> dict:
    base = {k: v for k, v in os.environ.items() if k not in KNOBS}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    return {**base, **ONE_THREAD}


def peer(name: str, tokenizer: str, jsonl: str, out: str, timeout: float) -> dict:
    """One peer's run in a fresh interpreter with one Rayon thread a process; its JSON, with the
    process's wall time ("process_seconds"), or {"error": ...} when it fails (recorded, not
    raised: a peer that cannot run here is a result too)."""
    cmd = [sys.executable, "-m", "benchmarks.token_peers", name, tokenizer, jsonl, out]
    t = time.perf_counter()
    try:
        done = subprocess.run(
            cmd, env=_env(), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    seconds = time.perf_counter() - t
    found = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode != 0 or not found:
        return {"error": f"exit {done.returncode}: {(done.stderr or done.stdout)[-2000:]}"}
    return {**json.loads(found[-1][len("RESULT ") :]), "process_seconds": seconds}


def thread_check(tokenizer: str, jsonl: str, timeout: float) -> dict:
    """The floor's first THREAD_CHECK_BYTES under each of ENVS: which knob the library honours."""
    out = {}
    for label, env in ENVS.items():
        r = token_floor.measure(tokenizer, jsonl, env, THREAD_CHECK_BYTES, timeout=timeout)
        out[label] = r
        log(
            f"  encode_batch, {label}: {r['bytes'] / r['seconds'] / 1e6:.2f} MB/s, CPU/wall "
            f"{r['cpu_seconds'] / r['seconds']:.2f}, {r['threads_after']} threads after"
        )
    return out


def _log_run(what: str, r: dict, mb: float) -> None:
    if "error" in r:
        log(f"  {what}: failed: {r['error'].strip().splitlines()[-1][:300]}")
        return
    extra = f", process {mb / r['process_seconds']:.2f} MB/s" if "process_seconds" in r else ""
    rate = mb / r["seconds"]
    log(f"  {what}: {r['seconds']:.1f} s, {rate:.2f} MB/s{extra}, {r['tokens']:,} tokens")


def measure_rounds(toks: dict, jsonl: str, workdir: str, timeout: float, rounds: int) -> dict:
    """{tokenizer: {"floor" | peer: [one result a round]}}, also kept in ``WORKDIR/runs.json``
    after every measurement: a run can take an hour, and one cut short keeps what it measured."""
    runs: dict = {name: {"floor": [], **{p: [] for p in PEERS}} for name in toks}

    def keep() -> None:
        with open(os.path.join(workdir, "runs.json"), "w") as f:
            json.dump(runs, f, indent=1)

    for i in range(rounds):
        log(f"  round {i + 1} of {rounds}")
        for name, t in toks.items():
            r = token_floor.measure(t["path"], jsonl, ONE_THREAD, timeout=timeout)
            runs[name]["floor"].append(r)
            mb = r["bytes"] / 1e6
            _log_run(f"floor {name}", r, mb)
            keep()
            for p in PEERS:
                out = os.path.join(workdir, "peers", p)
                runs[name][p].append(peer(p, t["path"], jsonl, out, timeout))
                _log_run(f"{p} {name}", runs[name][p][-1], mb)
                keep()
    return runs


def run_w5(w: TextWorkload, workdir: str, timeout: float, rounds: int) -> dict:
    """W5 end to end; the result for ``benchmarks.token_report``."""
    log(w.describe())
    jsonl = os.path.join(workdir, "jsonl")
    stats = text.generate(w, jsonl)
    log(
        f"  {stats['documents']:,} documents, {stats['text_bytes'] / 1e6:.0f} MB of text in "
        f"{stats['parts']} parts (sha256 {stats['sha256'][:12]})"
    )
    toks = bpe.tokenizers_for(stats["sha256"], jsonl, os.path.join(workdir, "bpe"), log)
    result = {
        "kind": "tokens",
        "workload": w.name,
        "describe": w.describe(),
        "text": stats,
        "tokenizers": toks,
        "threads": thread_check(toks["bpe-50k"]["path"], jsonl, timeout),
        "runs": measure_rounds(toks, jsonl, workdir, timeout, rounds),
    }
    if token_ours.stage_ready():
        result["build"] = {
            name: token_ours.builds(name, t["path"], jsonl, os.path.join(workdir, "ours"), timeout)
            for name, t in toks.items()
        }
    else:
        result["build"] = {"not_yet": token_ours.NOT_YET}
        log(f"  datapipe build: {token_ours.NOT_YET}")
    return result
