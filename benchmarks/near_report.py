"""The near-duplicate workload's results as markdown (``near_run``)."""

from __future__ import annotations

import statistics

TOOLS = ("datapipe", "datapipe verify: false", "datatrove")


def _value(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def speed(result: dict) -> list[str]:
    """The table of seconds, documents per second and ratios to datatrove."""
    docs = result["workload"]["documents"]
    peer = statistics.median(result["datatrove_seconds"])
    rows = [
        ("datapipe build, near_dedupe only, 2 workers", result["datapipe_seconds"]),
        ("the same, verify: false", result["unverified_seconds"]),
        ("datatrove MinHash, 4 stages, 2 tasks", result["datatrove_seconds"]),
        ("floor: signatures alone, 1 process", [result["floor_seconds"]]),
    ]
    out = ["| | seconds (runs) | docs/s (median) | vs datatrove |", "|---|---|---|---|"]
    for name, seconds in rows:
        median = statistics.median(seconds)
        runs = ", ".join(f"{s:.1f}" for s in seconds)
        out.append(f"| {name} | {runs} | {docs / median:,.0f} | {peer / median:.2f}x |")
    return out


def quality(result: dict) -> list[str]:
    """Recall by exact similarity, and precision."""
    out = ["| recall at exact >= | " + " | ".join(TOOLS) + " |", "|---|---|---|---|"]
    for t in ("0.9", "0.85", "0.8"):
        out.append(f"| {t} | " + " | ".join(_value(result["recall"][k][t]) for k in TOOLS) + " |")
    out.append("")
    for tool in TOOLS[:2]:
        p = result["precision"][tool]
        out.append(
            f"Precision of every {tool} removal (exact similarity to the document its reason names "
            f">= 0.7): {_value(p['precision'])} of {p['removed']} (lowest {_value(p['lowest'])})."
        )
    planted = ", ".join(f"{k} {_value(result['planted_precision'][k])}" for k in TOOLS)
    out.append(f"Planted copies removed that are at >= 0.7: {planted}.")
    return out


def curve(result: dict) -> list[str]:
    """Removal rate by exact similarity beside the S-curve and the candidates' edge rate."""
    from datapipe.builder.near_dedupe.lsh import s_curve

    out = [
        "| exact similarity | copies | removed: " + " | ".join(TOOLS) + " | S-curve 14x8 "
        "| candidate pairs | of them edges |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, cand in enumerate(result["candidates"]["by_bin"]):
        lo = cand["from"]
        bins = [result["curve"][k][i] for k in TOOLS]
        removed = " | ".join(_value(b["removed"]) for b in bins)
        out.append(
            f"| {lo:.2f}-{lo + 0.05:.2f} | {bins[0]['copies']} | {removed} | "
            f"{s_curve(lo + 0.025, 14, 8):.2f} | {cand['pairs']} | {_value(cand['edge'])} |"
        )
    c, n = result["candidates"], result["non_pairs"]
    out += [
        "",
        f"Candidate pairs: {c['pairs']:,} ({c['sampled']:,} sampled for their exact similarity); "
        f"random pairs of originals at exact >= 0.5: {n['at_least_0.5']} of {n['pairs']}.",
    ]
    return out


def report(result: dict) -> str:
    """The results as markdown."""
    w = result["workload"]
    head = [f"{w['describe']}; {w['documents']:,} documents, {w['copies']} planted copies", ""]
    lines = head + speed(result) + [""] + quality(result) + [""] + curve(result)
    return "\n".join(lines) + "\n"
