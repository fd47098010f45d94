"""The near-duplicate workload's quality: recall on the planted copies by exact similarity, the
precision of every removal (the exact similarity of the removed document to the one the reason
names), and the curve of removal rate against true similarity beside the theoretical S-curve."""

from __future__ import annotations

import random

import numpy as np

from benchmarks.near_corpus import Planted
from benchmarks.near_data import document_id, exact_similarity

BINS = np.round(np.arange(0.40, 1.0001, 0.05), 2)  # lower edges of the curve's bins


def recall(corpus: Planted, gone: set[str], at_least: float) -> float | None:
    """The share of planted copies of exact similarity >= ``at_least`` that were removed."""
    hits = [document_id(c) in gone for c, _, exact, _ in corpus.copies if exact >= at_least]
    return float(np.mean(hits)) if hits else None


def curve(corpus: Planted, gone: set[str]) -> list[dict]:
    """Per bin of exact similarity: planted copies in it, and the share removed."""
    out = []
    for lo in BINS.tolist():
        hi = lo + 0.05
        hits = [document_id(c) in gone for c, _, exact, _ in corpus.copies if lo <= exact < hi]
        out.append(
            {"from": lo, "copies": len(hits), "removed": float(np.mean(hits)) if hits else None}
        )
    return out


def precision(corpus: Planted, reasons: dict[str, str], threshold: float) -> dict:
    """Of every document datapipe removed: the share whose exact similarity to the kept document
    its reason names is at least ``threshold`` - 0.1, and the lowest such similarity."""
    index = {document_id(i): i for i in range(len(corpus.texts))}
    exact = []
    for key, reason in reasons.items():
        kept = reason.split()[2]
        exact.append(exact_similarity(corpus.texts[index[key]], corpus.texts[index[kept]]))
    values = np.array(exact) if exact else np.zeros(0)
    return {
        "removed": len(values),
        "precision": float((values >= threshold - 0.1).mean()) if len(values) else None,
        "lowest": float(values.min()) if len(values) else None,
    }


def planted_precision(corpus: Planted, gone: set[str], threshold: float) -> float | None:
    """Of the planted copies removed, the share of exact similarity >= ``threshold`` - 0.1 (for
    a tool that does not say which document a removed one duplicates)."""
    hits = [exact >= threshold - 0.1 for c, _, exact, _ in corpus.copies if document_id(c) in gone]
    return float(np.mean(hits)) if hits else None


def non_pairs(corpus: Planted, count: int = 2000, seed: int = 0) -> dict:
    """The exact similarity of ``count`` random pairs of originals: how rare near pairs are by
    chance (the precision's background)."""
    rng = random.Random(seed)
    first = corpus.copies[0][0] if corpus.copies else len(corpus.texts)
    values = [
        exact_similarity(corpus.texts[rng.randrange(first)], corpus.texts[rng.randrange(first)])
        for _ in range(count)
    ]
    return {"pairs": count, "at_least_0.5": int(sum(v >= 0.5 for v in values))}
