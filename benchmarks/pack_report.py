"""W6's rows of the table: rows and tokens per second into the training process for each tool in
one process and with 2 DataLoader workers, the ratios issue 32 sets targets for, the start-up,
memory, the mix against one dataset and the plan making. Figures are medians over the rounds with
the range in brackets."""

from __future__ import annotations

DASH = "—"
TOOLS = ("concat", "best-fit", "megatron", "litdata", "floor")
LABELS = {
    "concat": "datapipe concat",
    "best-fit": "datapipe best-fit",
    "megatron": "Megatron-Core GPTDataset",
    "litdata": "LitData TokensLoader",
    "floor": "floor: numpy copy, 1 process",
}
PEERS = ("megatron", "litdata")
SETTINGS = {0: "1 process", 2: "2 DataLoader workers"}
TARGETS = {"peer": 2.0, "floor": 0.5, "best-fit": 0.8, "mix": 0.9}


def header() -> list[str]:
    """The columns."""
    return ["figure", *(LABELS[t] for t in TOOLS), "ratios (issue 32's targets)"]


def describe(w: dict) -> str:
    """The table's title line."""
    d, s = w["data"], w["text"]
    cap = f"at most {w['rows_cap']:,} rows a read" if w.get("rows_cap") else "one epoch a read"
    return (
        f"{w['describe']}: {s['text_bytes'] / 1e6:.1f} MB of text, sha256 {s['sha256'][:12]}; "
        f"version {d['version'][:12]}, {d['documents']:,} documents, {d['tokens']:,} tokens "
        f"({d['dtype']}) in {len(d['shards'])} shard(s); rows of {w['length']}, batches of "
        f"{w['batch']}, {cap}, {w['epoch_rows']:,} concat rows an epoch"
    )


def _ok(runs: list[dict]) -> list[dict]:
    return [r for r in runs if "error" not in r]


def _rates(runs: list[dict]) -> list[float]:
    return [r["rows_after_first"] / r["read_seconds"] for r in _ok(runs) if r["read_seconds"]]


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _short(x: float) -> str:
    """12,345 below a million, else 1.2M or 310M."""
    if x < 1e6:
        return f"{x:,.0f}"
    return f"{x / 1e6:.1f}M" if x < 1e8 else f"{x / 1e6:.0f}M"


def _spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    if not values:
        return DASH
    show = _short if fmt == "short" else fmt.format
    mid = show(_median(values))
    if len(values) == 1:
        return mid
    return f"{mid} ({show(min(values))}-{show(max(values))})"


class _Runs:
    """The runs of one setting (num_workers), by tool."""

    def __init__(self, w: dict, workers: int) -> None:
        runs = w["runs"]
        self.w, self.workers = w, workers
        self.by_tool = {t: runs.get(f"{t}/{workers}", []) for t in TOOLS}
        self.by_tool["floor"] = runs.get("floor/0", [])
        self.mix = runs.get(f"mix/{workers}", [])

    def rate(self, tool: str) -> float | None:
        rates = _rates(self.by_tool[tool])
        return _median(rates) if rates else None

    def cells(self, value) -> list[str]:
        """One cell a tool: ``value(ok runs)``, "failed: ..." or a dash."""
        out = []
        for t in TOOLS:
            runs = self.by_tool[t]
            if t == "floor" and self.workers:
                out.append(DASH)
            elif _ok(runs):
                out.append(value(_ok(runs)))
            elif runs:
                last = runs[-1]["error"].strip().splitlines()[-1]
                out.append(f"failed: {last[:160]}")
            else:
                out.append("not run")
        return out


def _ratio(a: float | None, b: float | None, target: float) -> str:
    if not a or not b:
        return DASH
    return f"{a / b:.2f}x (>= {target}x)"


def _ratios(r: _Runs, floor: float | None) -> str:
    concat = r.rate("concat")
    best = max(PEERS, key=lambda p: r.rate(p) or 0.0)
    return (
        f"concat / best peer ({LABELS[best]}): {_ratio(concat, r.rate(best), TARGETS['peer'])}; "
        f"concat / floor: {_ratio(concat, floor, TARGETS['floor'])}; best-fit / concat: "
        f"{_ratio(r.rate('best-fit'), concat, TARGETS['best-fit'])}"
    )


def _setting_rows(w: dict, workers: int, fill: float | None) -> list[list[str]]:
    r = _Runs(w, workers)
    label, length = SETTINGS[workers], w["length"]
    floor = _Runs(w, 0).rate("floor")

    def tokens(runs: list[dict]) -> str:
        return _spread([x * length / 1e6 for x in _rates(runs)], "{:,.1f}")

    token_cells = r.cells(tokens)
    if fill is not None and r.rate("best-fit"):
        token_cells[1] += f"; real tokens {r.rate('best-fit') * length * fill / 1e6:,.1f}"
    return [
        [f"{label}: rows/s", *r.cells(lambda rs: _spread(_rates(rs))), _ratios(r, floor)],
        [f"{label}: M tokens/s (rows x {length})", *token_cells, DASH],
        [
            f"{label}: start, s: imports / first batch (workers, plans, indices)",
            *r.cells(
                lambda rs: (
                    f"{_spread([x['import_seconds'] for x in rs], '{:.2f}')} / "
                    f"{_spread([x['start_seconds'] for x in rs], '{:.2f}')}"
                )
            ),
            DASH,
        ],
        [
            f"{label}: peak RSS, MB: process / largest worker",
            *r.cells(
                lambda rs: (
                    f"{_spread([x['rss_mb'] for x in rs])}"
                    + (f" / {_spread([x['child_rss_mb'] for x in rs])}" if workers else "")
                )
            ),
            DASH,
        ],
        [f"{label}: rows read", *r.cells(lambda rs: f"{rs[-1]['rows']:,}"), DASH],
        _mix_row(r, label),
    ]


def _mix_row(r: _Runs, label: str) -> list[str]:
    """The mix of three sources at 0.5/0.3/0.2 in the concat column, against one dataset."""
    rates = _rates(r.mix)
    cell = _spread(rates) if rates else (r.mix[-1]["error"][-160:] if r.mix else "not run")
    ratio = _ratio(_median(rates) if rates else None, r.rate("concat"), TARGETS["mix"])
    return [
        f"{label}: mix of 3 token datasets at 0.5/0.3/0.2 (concat), rows/s",
        cell,
        *[DASH] * (len(TOOLS) - 1),
        f"mix / one dataset: {ratio}",
    ]


def _plan_rows(w: dict) -> tuple[list[list[str]], float | None]:
    """Plan making per mode (medians over rounds of the windows' sums), and best-fit's fill."""
    plans = [p for p in w["runs"].get("plans", []) if "error" not in p]
    if not plans:
        return [["plan making", *[DASH] * len(TOOLS), "not run"]], None
    cells, detail, fill = {}, "", None
    for mode in ("concat", "best-fit"):
        rounds = [[x for x in p["windows"] if x["mode"] == mode] for p in plans]
        rows = sum(x["rows"] for x in rounds[0])
        rates = [rows / max(1e-9, sum(x["plan_seconds"] for x in ws)) for ws in rounds]
        cells[mode] = _spread(rates, "short")
        if mode == "best-fit":
            ws = rounds[0]
            fill = sum(x["tokens"] for x in ws) / max(1, rows * w["length"])
            docs = sum(x["documents"] for x in ws)
            pieces = sum(x["pieces"] for x in ws)
            counting = _median([sum(x["row_count_seconds"] for x in r) for r in rounds])
            reading = _median([sum(x["docs_seconds"] for x in r) for r in rounds])
            detail = (
                f"best-fit: {len(ws)} window(s), {docs:,} documents, {pieces:,} pieces, {rows:,} "
                f"rows, fill {fill:.3f}; row_count {counting:.3f} s, docs {reading:.3f} s"
            )
    row = ["plan making (WindowPlan), rows/s", cells["concat"], cells["best-fit"]]
    return [row + [DASH] * (len(TOOLS) - 2) + [detail]], fill


def _prepare_row(w: dict) -> list[str]:
    d, lit = w["data"], w["litdata"]
    return [
        "prepared once (not timed in the reads), s",
        f"datapipe build, 2 workers: {d['build_seconds']:.1f}",
        DASH,
        "reads datapipe's shards",
        f"optimize, 2 workers: {lit['seconds']:.1f} ({lit['chunks']} chunks, "
        f"{lit['tokens']:,} tokens)",
        DASH,
        DASH,
    ]


def table(w: dict) -> list[list[str]]:
    """Every row of W6."""
    plan_rows, fill = _plan_rows(w)
    rows = []
    for workers in SETTINGS:
        rows += _setting_rows(w, workers, fill)
    return rows + plan_rows + [_prepare_row(w)]
