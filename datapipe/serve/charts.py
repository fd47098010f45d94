"""Bar charts as plain numbers for inline SVG: the per-stage accounting and the shard-size histogram."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

WIDTH, HEIGHT = 480, 160


@dataclass(frozen=True)
class Bar:
    """One bar: where it is drawn (x, y, width, height in SVG units) and its label and value."""

    x: float
    y: float
    width: float
    height: float
    label: str
    value: int


def bars(values: Sequence[tuple[str, int]], width: int = WIDTH, height: int = HEIGHT) -> list[Bar]:
    """Bars of ``values`` (label, value) side by side, scaled so the largest fills ``height``."""
    if not values:
        return []
    top = max(v for _, v in values) or 1
    step = width / len(values)
    return [Bar(i * step + 1, height - height * v / top, max(step - 2, 1), height * v / top, label, v)
            for i, (label, v) in enumerate(values)]


def histogram(sizes: Sequence[int], bins: int = 20) -> list[Bar]:
    """Shard sizes in ``bins`` equal ranges (fewer when the sizes are few), as bars labelled by their range."""
    if not sizes:
        return []
    low, high = min(sizes), max(sizes)
    bins = max(1, min(bins, len(set(sizes))))
    span = (high - low) / bins or 1
    counts = [0] * bins
    for s in sizes:
        counts[min(int((s - low) / span), bins - 1)] += 1
    return bars([(f"{int(low + i * span)}-{int(low + (i + 1) * span)} B", c) for i, c in enumerate(counts)])
