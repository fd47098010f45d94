"""The audit of packed rows in tokens: what an epoch's delivered rows hold, from the window plans
alone (no token is read)."""

from __future__ import annotations

from typing import Any

import numpy as np

from datapipe.loader.schedule import groups


def _source_parts(data: Any) -> list[tuple[str, Any, int]]:
    """(source name, PackedSet, its first shard id in ``data``'s numbering) of each source."""
    if hasattr(data, "datasets"):
        offsets = data.files.offsets.tolist()
        return list(zip(data.names, data.datasets, offsets[:-1], strict=True))
    return [(data.name, data, 0)]


def _delivered(
    source: Any, windows: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """Per document of ``source`` (storage order), the tokens and the pieces these rows deliver,
    each distinct piece counted once; and the tokens delivered, repeats included."""
    files, size = source.files, source.pack.length
    starts = np.concatenate([[0], np.cumsum(source.dataset.shard_sizes)])
    found: list[tuple[np.ndarray, ...]] = [(np.zeros(0, np.int64),) * 3]
    for window, where in groups(windows):
        plan = files.plan(window)
        p = plan.pieces(rows[where])
        inside = p.column < size
        doc = starts[plan.docs.shard[p.doc[inside]]] + plan.docs.number[p.doc[inside]]
        used = np.minimum(p.end - p.first, size - p.column)[inside]
        found.append((doc, p.first[inside], used))
    doc, first, used = (np.concatenate(a) for a in zip(*found, strict=True))
    # a mix reads a source more than once an epoch where its weight asks for more rows than it
    # has: a piece delivered again covers no more of its document
    _, once = np.unique(np.stack([doc, first]), axis=1, return_index=True)
    n = int(starts[-1])
    tokens = np.bincount(doc[once], weights=used[once], minlength=n).astype(np.int64)
    return tokens, np.bincount(doc[once], minlength=n), int(used.sum())


def token_report(data: Any, shard: np.ndarray, local: np.ndarray, pad: np.ndarray) -> dict:
    """An epoch's deliveries (window ``shard``, row ``local``, ``pad``: a repeat that fills the
    last batch) in tokens: tokens delivered, the padding share, documents delivered whole, split
    into pieces, cut (some tokens never delivered: a concat window's tail, truncation) or never,
    and each source's share of the real tokens."""
    real = ~pad
    size = _source_parts(data)[0][1].pack.length
    totals = {"whole": 0, "split": 0, "cut": 0, "never": 0}
    per_source: dict[str, int] = {}
    rows = int(real.sum())
    for name, source, first in _source_parts(data):
        mine = real & (shard >= first) & (shard < first + len(source.shard_sizes))
        tokens, pieces, total = _delivered(source, shard[mine] - first, local[mine])
        length = np.concatenate(
            [source.files.shard(s).lengths for s in range(len(source.dataset.shard_sizes))]
        )
        covered = tokens >= length
        totals["whole"] += int((covered & (pieces == 1)).sum())
        totals["split"] += int((covered & (pieces > 1)).sum())
        totals["cut"] += int(((tokens > 0) & ~covered).sum())
        totals["never"] += int((tokens == 0).sum())
        per_source[name] = total
    delivered = sum(per_source.values())
    return {
        "rows": rows,
        "tokens": delivered,
        "padding": round(1 - delivered / max(rows * size, 1), 6),
        "documents": totals,
        "token_shares": {n: round(t / max(delivered, 1), 6) for n, t in per_source.items()}
        if len(per_source) > 1
        else None,
    }
