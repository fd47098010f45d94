"""Locality-sensitive hashing of signatures: ``bands`` bands of ``rows`` values each; documents
that agree in every value of a band share its bucket and become candidate pairs. The S-curve
1 - (1 - s^rows)^bands is the chance that documents of similarity s become one."""

from __future__ import annotations

import numpy as np

from datapipe.builder.config_parts import NearDedupeArgs
from datapipe.builder.near_dedupe.shingles import MIX, mix64

RECALL_AT_THRESHOLD = 0.92  # the default bands and rows find a pair at the threshold this often


def s_curve(similarity: np.ndarray | float, bands: int, rows: int) -> np.ndarray:
    """The chance that documents of ``similarity`` share at least one bucket."""
    return 1 - (1 - np.asarray(similarity, dtype=float) ** rows) ** bands


def choose_bands(threshold: float, hashes: int) -> tuple[int, int]:
    """(bands, rows) for ``threshold`` out of ``hashes`` values: of the splits with bands x rows
    <= hashes that make a pair at the threshold a candidate at least RECALL_AT_THRESHOLD of the
    time, the one with the fewest candidates below it (each costs a check, never a removal)."""
    grid = np.linspace(0, threshold, 401)
    best: tuple[float, int, int] | None = None
    for rows in range(1, hashes + 1):
        bands = hashes // rows
        if s_curve(threshold, bands, rows) < RECALL_AT_THRESHOLD:
            continue
        below = float(np.trapezoid(s_curve(grid, bands, rows), grid))
        if best is None or below < best[0]:
            best = (below, bands, rows)
    return (best[1], best[2]) if best else (hashes, 1)


def bands_and_rows(args: NearDedupeArgs) -> tuple[int, int]:
    """A stage's (bands, rows): as given, the other one from ``hashes`` where one is given, else
    chosen for the threshold (``choose_bands``)."""
    if args.bands is not None and args.rows is not None:
        return args.bands, args.rows
    if args.bands is not None:
        return args.bands, args.hashes // args.bands
    if args.rows is not None:
        return args.hashes // args.rows, args.rows
    return choose_bands(args.threshold, args.hashes)


def band_keys(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(documents, bands) uint64: one hash of each band's values, apart per band."""
    n = len(signatures)
    values = signatures[:, : bands * rows].reshape(n, bands, rows).astype(np.uint64)
    x = np.broadcast_to(np.arange(1, bands + 1, dtype=np.uint64), (n, bands)).copy()
    with np.errstate(over="ignore"):
        for j in range(rows):
            x = x * MIX + values[:, :, j]
    return mix64(x)


def candidate_pairs(band: np.ndarray, key: np.ndarray, doc: np.ndarray) -> np.ndarray:
    """(pairs, 2) int64, each (earlier, later) document, unique and sorted, of the rows (band, key,
    document): within each bucket (band and key), every document with the bucket's first and with
    the one before it."""
    order = np.lexsort((doc, key, band))
    band, key, doc = band[order], key[order], doc[order]
    same = (band[1:] == band[:-1]) & (key[1:] == key[:-1])  # row i + 1 shares row i's bucket
    follower = np.flatnonzero(same) + 1
    if not len(follower):
        return np.zeros((0, 2), dtype=np.int64)
    heads = np.flatnonzero(np.concatenate([[True], ~same]))
    head = heads[np.searchsorted(heads, follower, side="right") - 1]
    pairs = np.concatenate(
        [np.stack([doc[head], doc[follower]], 1), np.stack([doc[follower - 1], doc[follower]], 1)]
    )
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return np.unique(np.sort(pairs, axis=1), axis=0)
