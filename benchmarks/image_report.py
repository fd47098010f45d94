"""W4's rows of the table: writes, train/eval reads in one process and with 2 workers, their share
of the floor."""

from __future__ import annotations

from benchmarks.peers import WORKERS

TOOLS = ["datapipe-img", "wds-img", "mds-img", "litdata-img"]
LABELS = {
    "datapipe-img": "datapipe",
    "wds-img": "WebDataset",
    "mds-img": "Mosaic MDS",
    "litdata-img": "LitData",
}
READS = [
    ("train-one", "train, 1 process"),
    ("train-loader", f"train, DataLoader {WORKERS} workers"),
    ("eval-one", "eval, 1 process"),
    ("eval-loader", f"eval, DataLoader {WORKERS} workers"),
]


def _rate(n: float) -> str:
    return f"{n / 1e3:.2f}k" if n >= 1e3 else f"{n:.0f}"


def _read(w: dict, tool: str, mode: str) -> dict | None:
    return w["tools"].get(tool, {}).get("read", {}).get(mode)


def _images_per_s(w: dict, tool: str, mode: str) -> float | None:
    r = _read(w, tool, mode)
    return r["samples"] / r["seconds"] if r else None


def _floor(w: dict) -> float | None:
    r = w.get("floor", {}).get("decode")
    return r["samples"] / r["seconds"] if r else None


def _share(w: dict, tool: str, mode: str) -> float | None:
    """The read's images/s over the floor on as many cores as it decodes on (1, or one per
    worker)."""
    rate, floor = _images_per_s(w, tool, mode), _floor(w)
    if rate is None or not floor:
        return None
    return rate / (floor * (WORKERS if mode.endswith("loader") else 1))


def _rss(w: dict, tool: str, mode: str) -> float | None:
    r = _read(w, tool, mode)
    return r["rss_mb"] + r["child_rss_mb"] if r else None


def _write(w: dict, tool: str) -> float | None:
    r = w["tools"].get(tool, {}).get("write")
    return w["samples"] / r["seconds"] if r else None


def _disk(w: dict, tool: str) -> float | None:
    r = w["tools"].get(tool, {}).get("write")
    return r["disk_bytes"] / w["images"]["bytes"] if r else None


def _figures() -> list[tuple[str, bool, object, object]]:
    figures = [
        (
            "write from the files, images/s (datapipe: `datapipe build`, 2 Dask workers)",
            True,
            _write,
            _rate,
        ),
        ("disk / JPEG bytes", False, _disk, lambda v: f"{v:.3f}x"),
    ]
    for mode, label in READS:
        figures.append(
            (f"{label}, images/s", True, lambda w, t, m=mode: _images_per_s(w, t, m), _rate)
        )
    for mode, label in READS:
        figures.append(
            (
                f"{label}, share of the Pillow floor",
                True,
                lambda w, t, m=mode: _share(w, t, m),
                lambda v: f"{v:.2f}",
            )
        )
    for mode, label in READS:
        main = "main + worker" if mode.endswith("loader") else "1 process"
        figures.append(
            (
                f"{label}, peak RSS ({main}), MB",
                False,
                lambda w, t, m=mode: _rss(w, t, m),
                lambda v: f"{v:.0f}",
            )
        )
    return figures


def table(w: dict) -> list[list[str]]:
    """Rows of [figure, one cell per tool, datapipe / best peer]; the floor last."""
    rows = []
    for label, higher, value, fmt in _figures():
        values = {t: value(w, t) for t in TOOLS}
        if all(v is None for v in values.values()):
            continue
        cells = [fmt(values[t]) if values[t] is not None else "—" for t in TOOLS]
        peers = {t: v for t, v in values.items() if t != TOOLS[0] and v is not None}
        ratio = "—"
        if values[TOOLS[0]] is not None and peers:
            best = (max if higher else min)(peers, key=peers.get)
            ratio = f"{values[TOOLS[0]] / peers[best]:.2f}x {LABELS[best]}"
        rows.append([label, *cells, ratio])
    floor = w.get("floor", {}).get("decode")
    if floor:
        rows.append(
            [
                'floor: Pillow full decode (`Image.open(path).convert("RGB")`), 1 process',
                f"{_rate(floor['samples'] / floor['seconds'])} images/s per core",
            ]
            + [""] * len(TOOLS)
        )
    return rows


def header() -> list[str]:
    """The table's header row."""
    return ["figure", *(LABELS[t] for t in TOOLS), "datapipe / best peer"]


def describe(w: dict) -> str:
    """The workload's line, with the images' measured mean size."""
    s = w["images"]
    return (
        f"{w['describe']}; measured: mean {s['mean_bytes'] / 1e3:.1f} KB, "
        f"{s['mean_width']:.0f}x{s['mean_height']:.0f}"
    )
