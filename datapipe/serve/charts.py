"""Charts as plain numbers for inline SVG: the stage accounting, the shard-size histogram, the
parent graph."""

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
    return [
        Bar(i * step + 1, height - height * v / top, max(step - 2, 1), height * v / top, label, v)
        for i, (label, v) in enumerate(values)
    ]


def histogram(sizes: Sequence[int], bins: int = 20) -> list[Bar]:
    """Shard sizes in ``bins`` equal ranges (fewer when the sizes are few), as bars labelled by
    their range."""
    if not sizes:
        return []
    low, high = min(sizes), max(sizes)
    bins = max(1, min(bins, len(set(sizes))))
    span = (high - low) / bins or 1
    counts = [0] * bins
    for s in sizes:
        counts[min(int((s - low) / span), bins - 1)] += 1
    return bars(
        [(f"{int(low + i * span)}-{int(low + (i + 1) * span)} B", c) for i, c in enumerate(counts)]
    )


@dataclass(frozen=True)
class Node:
    """A version in the parent graph: its lane (column) and row, and what to label it with."""

    version: str
    lane: int
    row: int
    tags: tuple[str, ...]


ROW, LANE = 28, 22  # pixels between rows and between lanes of the parent graph


Graph = tuple[list[Node], list[tuple[Node, Node]]]


def parent_graph(versions: Sequence[tuple[str, str | None, Sequence[str]]]) -> Graph:
    """Nodes and (child, parent) edges of (version, parent, tags) rows in the order given (newest
    first), each version in a lane as `git log --graph` draws them: a parent continues its first
    child's lane."""
    waiting: list[str | None] = []  # per lane, the version it leads to
    known = {v for v, _, _ in versions}
    nodes: dict[str, Node] = {}
    for row, (version, parent, tags) in enumerate(versions):
        if version in waiting:
            lane = waiting.index(version)
            waiting = [None if w == version else w for w in waiting]
        elif None in waiting:
            lane = waiting.index(None)
        else:
            lane = len(waiting)
            waiting.append(None)
        waiting[lane] = parent if parent in known and parent not in nodes else None
        nodes[version] = Node(version, lane, row, tuple(tags))
    edges = [(nodes[v], nodes[p]) for v, p, _ in versions if p in nodes]
    return list(nodes.values()), edges
