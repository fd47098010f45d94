"""The results as a table (markdown, printed and saved), results.json and a PNG chart."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from benchmarks import image_report, pack_report, token_report

TOOLS = ["datapipe", "wds", "wds-int", "mds", "litdata", "litdata-bw"]
LABELS = {
    "datapipe": "datapipe",
    "wds": "WebDataset",
    "wds-int": "WebDataset int mtime",
    "mds": "Mosaic MDS",
    "litdata": "LitData optimize",
    "litdata-bw": "LitData BinaryWriter",
}


def rate(n: float) -> str:
    """12.3k, 1.2M, 950."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if n >= scale:
            v = n / scale
            return f"{v:.1f}{suffix}" if v < 100 else f"{v:.0f}{suffix}"
    return f"{n:.0f}"


def bandwidth(bytes_per_s: float) -> str:
    return (
        f"{bytes_per_s / 1e9:.2f} GB/s" if bytes_per_s >= 1e9 else f"{bytes_per_s / 1e6:.0f} MB/s"
    )


# figure: (label, higher is better, value(workload result, tool) -> float | None, format)
Figure = tuple[str, bool, Callable[[dict, str], float | None], Callable[[float], str]]


def _write(w: dict, tool: str, per: str) -> float | None:
    r = w["tools"].get(tool, {}).get("write")
    if not r:
        return None
    return (w["samples"] if per == "samples" else w["payload_bytes"]) / r["seconds"]


def _read(w: dict, tool: str, mode: str, per: str) -> float | None:
    r = w["tools"].get(tool, {}).get("read", {}).get(mode)
    if not r:
        return None
    return (r["samples"] if per == "samples" else r["bytes"]) / r["seconds"]


def _ragged(w: dict, tool: str, mode: str, per: str) -> float | None:
    """datapipe's read of ``mode`` with the ragged decoder; a peer's plain read (for the ratio)."""
    return _read(w, tool, f"{mode}-ragged" if tool == "datapipe" else mode, per)


def _rss(w: dict, tool: str, mode: str) -> float | None:
    r = w["tools"].get(tool, {}).get("read", {}).get(mode)
    return None if not r else r["rss_mb"] + r["child_rss_mb"]


def _anon(w: dict, tool: str, mode: str) -> float | None:
    r = w["tools"].get(tool, {}).get("read", {}).get(mode)
    return None if not r or "anon_peak_mb" not in r else r["anon_peak_mb"]


def _disk(w: dict, tool: str) -> float | None:
    r = w["tools"].get(tool, {}).get("write")
    return None if not r else r["disk_bytes"] / w["payload_bytes"]


def _build(w: dict, tool: str, workers: int, after_start: bool = False) -> float | None:
    """Samples per second of `datapipe build`: the command's wall time, or its passes alone
    (``after_start``:
    without interpreter start, imports, cluster start and stop; from the summary's "seconds")."""
    if tool != "datapipe":
        return None
    runs = [b for b in w.get("build", []) if b["workers"] == workers]
    if not runs:
        return None
    seconds = runs[0]["summary"].get("seconds", {})
    if after_start:
        return w["samples"] / (seconds["total"] - seconds["start"]) if "start" in seconds else None
    return w["samples"] / runs[0]["seconds"]


FIGURES: list[Figure] = [
    ("write, samples/s", True, lambda w, t: _write(w, t, "samples"), rate),
    ("write, payload MB/s", True, lambda w, t: _write(w, t, "bytes"), bandwidth),
    ("disk / payload", False, _disk, lambda v: f"{v:.2f}x"),
    ("read 1 process, samples/s", True, lambda w, t: _read(w, t, "one", "samples"), rate),
    ("read 1 process, payload MB/s", True, lambda w, t: _read(w, t, "one", "bytes"), bandwidth),
    (
        "read 1 process by ds[i], samples/s",
        True,
        lambda w, t: _read(w, t, "index", "samples"),
        rate,
    ),
    (
        "read DataLoader 2 workers, samples/s",
        True,
        lambda w, t: _read(w, t, "loader", "samples"),
        rate,
    ),
    (
        "read DataLoader 2 workers, payload MB/s",
        True,
        lambda w, t: _read(w, t, "loader", "bytes"),
        bandwidth,
    ),
    # datapipe with decode={"bin": "ragged"}, against the same reads of the peers
    (
        "read 1 process, datapipe ragged, samples/s",
        True,
        lambda w, t: _ragged(w, t, "one", "samples"),
        rate,
    ),
    (
        "read 1 process, datapipe ragged, payload MB/s",
        True,
        lambda w, t: _ragged(w, t, "one", "bytes"),
        bandwidth,
    ),
    (
        "read DataLoader 2 workers, datapipe ragged, samples/s",
        True,
        lambda w, t: _ragged(w, t, "loader", "samples"),
        rate,
    ),
    (
        "read DataLoader 2 workers, datapipe ragged, payload MB/s",
        True,
        lambda w, t: _ragged(w, t, "loader", "bytes"),
        bandwidth,
    ),
    ("peak RSS 1 process, MB", False, lambda w, t: _rss(w, t, "one"), lambda v: f"{v:.0f}"),
    (
        "peak private memory (RssAnon) 1 process, MB",
        False,
        lambda w, t: _anon(w, t, "one"),
        lambda v: f"{v:.0f}",
    ),
    (
        "peak RSS DataLoader (main + worker), MB",
        False,
        lambda w, t: _rss(w, t, "loader"),
        lambda v: f"{v:.0f}",
    ),
    ("datapipe build, 1 Dask worker, samples/s", True, lambda w, t: _build(w, t, 1), rate),
    ("datapipe build, 2 Dask workers, samples/s", True, lambda w, t: _build(w, t, 2), rate),
    (
        "datapipe build passes (no start-up), 1 worker, samples/s",
        True,
        lambda w, t: _build(w, t, 1, True),
        rate,
    ),
    (
        "datapipe build passes (no start-up), 2 workers, samples/s",
        True,
        lambda w, t: _build(w, t, 2, True),
        rate,
    ),
    (
        "datapipe build, 1 worker: peak worker RSS, MB",
        False,
        lambda w, t: _build_rss(w, t, 1),
        lambda v: f"{v:.0f}",
    ),
    (
        "datapipe build, 2 workers: peak worker RSS, MB",
        False,
        lambda w, t: _build_rss(w, t, 2),
        lambda v: f"{v:.0f}",
    ),
]


def _build_rss(w: dict, tool: str, workers: int) -> float | None:
    """The largest peak resident memory of a worker of `datapipe build`, MB (from its summary)."""
    runs = [b for b in w.get("build", []) if b["workers"] == workers] if tool == "datapipe" else []
    peak = runs[0]["summary"].get("worker_peak_rss") if runs else None
    return peak / 1e6 if peak else None


def _floor_rows(w: dict) -> list[list[str]]:
    """The floors in the datapipe column; the last column: datapipe's one-process read (disk
    bytes/s) over it."""
    rows = []
    disk = w["tools"]["datapipe"]["write"]["disk_bytes"]
    one = _read(w, "datapipe", "one", "samples")
    for mode, label in (
        ("cat", "floor: cat datapipe shards (8 MB reads)"),
        ("memmap", "floor: numpy sum over np.memmap of the shards"),
        ("copy", "floor: numpy copy from np.memmap into a reused 25 MiB buffer"),
    ):
        r = w.get("floor", {}).get(mode)
        if r:
            bps = r["bytes"] / r["seconds"]
            floor_rate = bps / (disk / w["samples"])
            ratio = f"read 1 process = {one / floor_rate:.2f}x" if one else "—"
            rows.append(
                [label, f"{bandwidth(bps)} = {rate(floor_rate)} samples/s"]
                + [""] * (len(TOOLS) - 1)
                + [ratio]
            )
    return rows


def _write_floor_rows(w: dict) -> list[list[str]]:
    """The write floors (benchmarks/write_floor.py) in the datapipe column, in payload MB/s; the
    last column:
    datapipe's library write over it."""
    floors, ours = w.get("write_floor"), _write(w, "datapipe", "bytes")
    rows = []
    for key, label in (
        ("hash_copy", "write floor: one copy + one sha256 per payload byte"),
        ("hash_copy_file", "write floor: that + a write to a new file (page cache)"),
    ):
        if floors and key in floors:
            bps = w["payload_bytes"] / floors[key]
            rows.append(
                [label, bandwidth(bps)]
                + [""] * (len(TOOLS) - 1)
                + [f"datapipe write = {ours / bps:.2f}x" if ours else "—"]
            )
    return rows


def _fixed_rows(w: dict) -> list[list[str]]:
    """What start-up alone allows a build, as the most samples/s end to end: the workload over a
    10-row build's seconds; over the Dask floor's (building.DASK_FLOOR); and over the Dask floor
    plus the best peer's own in-memory write shared perfectly by the workers (no Parquet to read, no
    hashing beyond the peer's).
    The last column puts each ceiling against the best peer's write rate."""
    f = w.get("build_fixed")
    writes = {t: _write(w, t, "samples") for t in TOOLS if t != "datapipe"}
    writes = {t: v for t, v in writes.items() if v}
    if not f or not writes:
        return []
    best = max(writes, key=writes.get)
    n = f["workers"]
    ceilings = [
        (f"build ceiling: datapipe build of 10 rows, {n} workers", f["build_10_rows"]),
        (
            f"build ceiling: Python + LocalCluster({n}) + pandas/pyarrow in the workers + stop",
            f["dask_floor"],
        ),
        (
            f"build ceiling: that + {LABELS[best]}'s write split over {n} workers",
            f["dask_floor"] + w["samples"] / writes[best] / n,
        ),
    ]
    return [
        [label, f"{seconds:.2f} s: at most {rate(w['samples'] / seconds)} samples/s"]
        + [""] * (len(TOOLS) - 1)
        + [f"ceiling = {w['samples'] / seconds / writes[best]:.2f}x {LABELS[best]} write"]
        for label, seconds in ceilings
    ]


def table(w: dict) -> list[list[str]]:
    """Rows of [figure, one cell per tool, datapipe / best peer]."""
    rows = []
    for label, higher, value, fmt in FIGURES:
        values = {t: value(w, t) for t in TOOLS}
        if all(v is None for v in values.values()):
            continue
        cells = [fmt(values[t]) if values[t] is not None else "—" for t in TOOLS]
        peers = {t: v for t, v in values.items() if t != "datapipe" and v is not None}
        ratio = "—"
        if values["datapipe"] is not None and peers:
            best = (max if higher else min)(peers, key=peers.get)
            ratio = f"{values['datapipe'] / peers[best]:.2f}x {LABELS[best]}"
        rows.append([label, *cells, ratio])
    return rows + _write_floor_rows(w) + _fixed_rows(w) + _many_shards_rows(w) + _floor_rows(w)


def _many_shards_rows(w: dict) -> list[list[str]]:
    """datapipe's one-process read of the same samples in 10x as many shards: its peak RSS over the
    1x figure."""
    many, one = w.get("rss_10x_shards"), w["tools"]["datapipe"].get("read", {}).get("one")
    if not many or not one:
        return []
    rss = many["rss_mb"] + many["child_rss_mb"]
    cells = [f"{rss:.0f} MB RSS, {rate(many['samples'] / many['seconds'])} samples/s"] + [""] * (
        len(TOOLS) - 1
    )
    return [
        [
            "datapipe 1 process, 10x as many shards",
            *cells,
            f"RSS {rss / (one['rss_mb'] + one['child_rss_mb']):.2f}x of 1x shards",
        ]
    ]


def markdown(results: dict) -> str:
    """The whole table, one block per workload, in markdown."""
    out = []
    for w in results["workloads"].values():
        kinds = {"images": image_report, "tokens": token_report, "packed": pack_report}
        kind = kinds.get(w.get("kind"))
        default = ["figure", *(LABELS[t] for t in TOOLS), "datapipe / best peer"]
        header = kind.header() if kind else default
        out += [
            f"**{kind.describe(w) if kind else w['describe']}**",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        out += ["| " + " | ".join(row) + " |" for row in (kind.table(w) if kind else table(w))]
        out += [""]
    m = results["machine"]
    out.append(
        f"{m['date']}, datapipe at {m.get('git', '?')}, {m['cpu']}, {m['cores']} cores, "
        f"{m['ram_gib']:.0f} GiB RAM, Python {m['python']}, torch {m['torch']}; "
        f"load average {m['load_before']} before, {m['load_after']} after; "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items())
        + (_decode_note(m["datapipe_decode"]) if "datapipe_decode" in m else "")
        + (f"; whole run {results['seconds']:.0f} s" if "seconds" in results else "")
    )
    return "\n".join(out)


def _decode_note(decode: str) -> str:
    if decode == "both":  # since issue 17: the headline rows are the default decode
        return (
            "; datapipe reads bin as the default decode gives it (a list of bytes "
            "per batch), and in the "
            "\"datapipe ragged\" rows with decode={'bin': 'ragged'}"
        )
    return f"; datapipe reads bin with decode={decode!r}"


def check(results: dict) -> list[str]:
    """Readers that did not see every sample (datapipe drops the last partial batch: N mod 256)."""
    problems = []
    for w in results["workloads"].values():
        for tool, r in w.get("tools", {}).items():
            for mode, m in r.get("read", {}).items():
                expected = w["samples"] - (w["samples"] % 256 if tool.startswith("datapipe") else 0)
                if m["samples"] != expected:
                    problems.append(
                        f"{w['workload']} {tool} {mode}: read {m['samples']} samples, expected "
                        f"{expected}"
                    )
    return problems


def chart(results: dict, path: str) -> None:
    """Log-scale bars: write / read 1 process / read DataLoader per tool, one panel per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = [w for w in results["workloads"].values() if "kind" not in w]
    if not workloads:
        return
    fig, axes = plt.subplots(1, len(workloads) + 1, figsize=(6 * len(workloads) + 5, 5))
    groups = [
        ("write", lambda w, t: _write(w, t, "samples")),
        ("read, 1 process", lambda w, t: _read(w, t, "one", "samples")),
        ("read, DataLoader", lambda w, t: _read(w, t, "loader", "samples")),
    ]
    width = 0.8 / len(TOOLS)
    for ax, w in zip(axes, workloads, strict=False):
        for i, tool in enumerate(TOOLS):
            xs, ys = [], []
            for g, (_, value) in enumerate(groups):
                v = value(w, tool)
                if v:
                    xs.append(g + (i - len(TOOLS) / 2 + 0.5) * width)
                    ys.append(v)
            ax.bar(xs, ys, width, label=LABELS[tool])
        ax.set_xticks(range(len(groups)), [g for g, _ in groups])
        ax.set_yscale("log")
        ax.set_ylabel("samples/s (log)")
        ax.set_title(w["describe"], fontsize=9)
    ax = axes[-1]
    for i, tool in enumerate(TOOLS):
        ys = [_rss(w, tool, "loader") or 0 for w in workloads]
        ax.bar(
            [g + (i - len(TOOLS) / 2 + 0.5) * width for g in range(len(workloads))],
            ys,
            width,
            label=LABELS[tool],
        )
    ax.set_xticks(range(len(workloads)), [w["workload"] for w in workloads])
    ax.set_ylabel("peak RSS, DataLoader main + worker (MB)")
    ax.set_title("memory", fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(TOOLS), fontsize=8)
    m = results["machine"]
    fig.suptitle(f"datapipe vs peers, {m['date']}, {m['cores']} cores ({m['cpu']})", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save(results: dict, out: str, stem: str = "results") -> dict[str, str]:
    """STEM.json, STEM.md and STEM.png in ``out``; returns their paths."""
    os.makedirs(out, exist_ok=True)
    paths = {k: os.path.join(out, f"{stem}.{k}") for k in ("json", "md", "png")}
    with open(paths["json"], "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    with open(paths["md"], "w") as f:
        f.write(markdown(results) + "\n")
    if any("kind" not in w for w in results["workloads"].values()):
        chart(results, paths["png"])
    else:
        del paths["png"]
    return paths
