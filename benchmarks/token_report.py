"""W5's rows of the table: per tokenizer, the one-thread floor and its 2-worker projection, each
tool's rate and its share of that floor, memory, the tokens written and their bytes on disk; then
which environment made ``encode_batch`` one thread. Figures are medians over the rounds with the
range in brackets (the VM is noisy); MB are of the documents' text, UTF-8."""

from __future__ import annotations

from benchmarks.token_floor import ENVS
from benchmarks.token_ours import NOT_YET
from benchmarks.token_peers import LABELS, PEERS, WORKERS

DASH = "—"


def header() -> list[str]:
    """The columns."""
    return [
        "figure",
        "floor: `encode_batch`, 1 thread",
        "datapipe build",
        *(LABELS[p] for p in PEERS),
        "datapipe / best peer",
    ]


def describe(w: dict) -> str:
    """The table's title line."""
    s = w["text"]
    toks = ", ".join(f"{n} ({w['tokenizers'][n]['vocab_size']:,} ids)" for n in _names(w))
    return (
        f"{w['describe']}: {s['documents']:,} documents, {s['text_bytes'] / 1e6:.1f} MB of text "
        f"in {s['parts']} parts, sha256 {s['sha256'][:12]}; tokenizers {toks}"
    )


def _names(w: dict) -> list[str]:
    """The tokenizers, smallest vocabulary first (results.json sorts its keys)."""
    return sorted(w["tokenizers"], key=lambda n: w["tokenizers"][n]["vocab_size"])


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return DASH
    mid = fmt.format(_median(values))
    if len(values) == 1:
        return mid
    return f"{mid} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def _ok(runs: list[dict], key: str = "seconds") -> list[dict]:
    return [r for r in runs if "error" not in r and key in r]


def _mbs(runs: list[dict], mb: float, key: str = "seconds", times: float = 1.0) -> list[float]:
    return [times * mb / r[key] for r in _ok(runs, key)]


def _sampled(runs: list[dict]) -> list[dict]:
    """The runs whose CPU and worker memory cover every process below the peer's (until
    2026-12-06 they counted only reaped children, which misses datatrove's workers)."""
    return [r for r in runs if "processes_below" in r]


def _peer_cell(runs: list[dict], value) -> str:
    if not _ok(runs):
        errors = [r["error"] for r in runs if "error" in r]
        last = errors[-1].strip().splitlines()[-1] if errors else "not run"
        return f"failed: {last[:200]}"
    return value(_ok(runs))


class _Ours:
    """datapipe's cells from its builds of one tokenizer, or "not yet" before the stage."""

    def __init__(self, w: dict, name: str, mb: float, floor2: float) -> None:
        builds = w["build"].get(name, []) if "not_yet" not in w["build"] else []
        self.by_workers = {b["workers"]: b for b in builds}
        self.mb, self.floor2 = mb, floor2

    def rate(self, workers: int, passes: bool = False) -> float | None:
        b = self.by_workers.get(workers)
        if not b:
            return None
        s = b["summary"].get("seconds", {})
        if passes:
            return self.mb / (s["total"] - s["start"]) if "start" in s else None
        return self.mb / b["seconds"]

    def cell(self, value: float | None, fmt: str = "{:.2f}", long: bool = False) -> str:
        if not self.by_workers:
            return NOT_YET if long else "not yet"
        return DASH if value is None else fmt.format(value)

    def rss(self) -> float | None:
        b = self.by_workers.get(WORKERS)
        peak = b["summary"].get("worker_peak_rss") if b else None
        return peak / 1e6 if peak else None


def _rows(w: dict, name: str) -> list[list[str]]:
    t, runs = w["tokenizers"][name], w["runs"][name]
    mb = w["text"]["text_bytes"] / 1e6
    floor = runs["floor"]
    floor2 = WORKERS * _median(_mbs(floor, mb))
    ours = _Ours(w, name, mb, floor2)
    dtype = "uint16" if t["vocab_size"] <= 2**16 else "uint32"
    label = f"{name} ({t['vocab_size']:,} ids, {dtype})"
    expected = sorted({r["tokens"] + r["documents"] for r in floor})
    best = {p: _median(v) for p in PEERS if (v := _mbs(runs[p], mb, "process_seconds"))}
    best_peer = max(best, key=best.get) if best else None
    ours2 = ours.rate(WORKERS)

    def peers(value) -> list[str]:
        return [_peer_cell(runs[p], value) for p in PEERS]

    def tokens(rs: list[dict]) -> str:
        got = sorted({r["tokens"] for r in rs})
        return ", ".join(f"{n:,}" for n in got) + (" (all)" if got == expected else " (differs)")

    vs_best = (
        f"{ours2 / best[best_peer]:.2f}x {LABELS[best_peer]}"
        if ours2 and best_peer
        else f"{DASH} (best peer: {LABELS[best_peer]} {best[best_peer]:.2f} MB/s)"
        if best_peer
        else DASH
    )
    return [
        [
            f"{label}: MB/s, 1 thread (datapipe: 1 worker, end to end)",
            _spread(_mbs(floor, mb)),
            ours.cell(ours.rate(1)),
            *[DASH] * len(PEERS),
            DASH,
        ],
        [
            f"{label}: MB per CPU-second (the floor's process; the peers' main and workers)",
            _spread(_mbs(floor, mb, "cpu_seconds")),
            DASH,
            *peers(lambda rs: _spread(_mbs(_sampled(rs), mb, "cpu_seconds"))),
            DASH,
        ],
        [
            f"{label}: MB/s, {WORKERS} workers, end to end (interpreter, imports, start, all)",
            f"{floor2:.2f} (x{WORKERS}, projected)",
            ours.cell(ours2, long=True),
            *peers(lambda rs: _spread(_mbs(rs, mb, "process_seconds"))),
            vs_best,
        ],
        [
            f"{label}: MB/s, {WORKERS} workers, the call alone (datapipe: its passes)",
            f"{floor2:.2f} (x{WORKERS}, projected)",
            ours.cell(ours.rate(WORKERS, passes=True)),
            *peers(lambda rs: _spread(_mbs(rs, mb))),
            DASH,
        ],
        [
            f"{label}: end to end over the {WORKERS}-worker floor (median floor)",
            "1",
            ours.cell(ours2 / floor2 if ours2 else None),
            *peers(lambda rs: _spread([x / floor2 for x in _mbs(rs, mb, "process_seconds")])),
            DASH,
        ],
        [
            f"{label}: peak RSS, main process / largest worker, MB",
            DASH,
            ours.cell(ours.rss(), "{:.0f} (largest worker)"),
            *peers(
                lambda rs: (
                    f"{_spread([r['rss_mb'] for r in rs], '{:.0f}')} / "
                    f"{_spread([r['worker_rss_mb'] for r in _sampled(rs)], '{:.0f}')}"
                )
            ),
            DASH,
        ],
        [
            f"{label}: tokens written (the floor's, plus an end-of-text a document)",
            ", ".join(f"{n:,}" for n in expected),
            ours.cell(None),
            *peers(tokens),
            DASH,
        ],
        [
            f"{label}: on disk, MB",
            DASH,
            ours.cell(None),
            *peers(lambda rs: _spread([r["disk_bytes"] / 1e6 for r in rs], "{:.0f}")),
            DASH,
        ],
    ]


def _thread_rows(w: dict) -> list[list[str]]:
    return [
        [
            f"`encode_batch`, first {r['bytes'] / 1e6:.0f} MB, bpe-50k, env {label}",
            f"{r['bytes'] / r['seconds'] / 1e6:.2f} MB/s, CPU/wall "
            f"{r['cpu_seconds'] / r['seconds']:.2f}, threads: {r['threads_after']}",
            *[""] * (len(PEERS) + 2),
        ]
        for label, r in sorted(w["threads"].items(), key=lambda kv: list(ENVS).index(kv[0]))
    ]


def table(w: dict) -> list[list[str]]:
    """Every row of W5."""
    rows = []
    for name in _names(w):
        rows += _rows(w, name)
    return rows + _thread_rows(w)
