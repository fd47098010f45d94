"""MinHash signatures: per document, the least value of each of ``count`` hash functions over its
shingles; two documents agree at a function with probability their shingle sets' Jaccard
similarity."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.builder.near_dedupe.shingles import shingle_chunks

EMPTY = np.uint32(0xFFFFFFFF)  # every value of a document with no shingle
VALUES = 1 << 20  # hash values computed at once (8 MB of uint64), whatever the count


@dataclass(frozen=True)
class HashFamily:
    """``count`` multiply-shift hash functions drawn from ``seed``: h(x) = (a x + b) >> 32 over
    64-bit words, a odd."""

    seed: int
    count: int

    def params(self) -> tuple[np.ndarray, np.ndarray]:
        """(a, b), one of each per function."""
        rng = np.random.Generator(np.random.PCG64([0x6D696E68, self.seed]))
        high = np.iinfo(np.uint64).max
        a = rng.integers(0, high, size=self.count, dtype=np.uint64, endpoint=True) | np.uint64(1)
        b = rng.integers(0, high, size=self.count, dtype=np.uint64, endpoint=True)
        return a, b


def signatures(texts: Sequence[Any], size: int, family: HashFamily) -> np.ndarray:
    """The (documents, family.count) uint32 signatures of ``texts`` shingled by ``size`` words; a
    document without a shingle (no words, null) is all EMPTY."""
    a, b = family.params()
    a, b = a[:, None], b[:, None]
    out = np.full((len(texts), family.count), EMPTY, dtype=np.uint32)
    # functions along rows, shingles along columns: each function's mins are one reduceat in
    # cache, where the other layout reduces with a stride
    step = max(64, VALUES // family.count)  # shingles at once
    buffer = np.empty((family.count, step), dtype=np.uint64)
    for docs, hashes, owner in shingle_chunks(texts, size):
        for lo in range(0, len(hashes), step):
            x, o = hashes[lo : lo + step], owner[lo : lo + step]
            values = buffer[:, : len(x)]
            with np.errstate(over="ignore"):
                np.multiply(a, x, out=values)
                values += b
            values >>= np.uint64(32)
            starts = np.flatnonzero(np.concatenate([[True], o[1:] != o[:-1]]))
            least = np.minimum.reduceat(values, starts, axis=1).T.astype(np.uint32)
            rows = docs[o[starts]]  # a document cut by the slice is met again in the next
            out[rows] = np.minimum(out[rows], least)
    return out


def is_empty(signatures: np.ndarray) -> np.ndarray:
    """Per document, whether it had no shingle."""
    return (signatures == EMPTY).all(axis=1)


def similarity(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The estimated Jaccard similarity of each pair of rows: the share of equal values."""
    if not len(first):
        return np.zeros(0)
    return (first == second).mean(axis=1)
