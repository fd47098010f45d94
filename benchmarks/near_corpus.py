"""A corpus with planted near-duplicates, for the near_dedupe stage's quality (issue 33): copies of
real documents edited by word insertions, deletions and substitutions until the exact Jaccard
similarity of their word shingles (the stage's own shingling) reaches a target.

Also used by tests/builder/test_near_dedupe.py at small size.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from datapipe.builder.near_dedupe.shingles import words_of

LEVELS = (0.95, 0.9, 0.85, 0.8, 0.7, 0.5)  # the planted copies' target similarities


def shingle_set(text: str, size: int) -> set[tuple[str, ...]]:
    """The stage's shingles of ``text`` as word tuples (exact, no hashing)."""
    words = words_of(text)
    if not words:
        return set()
    if len(words) < size:
        return {tuple(words)}
    return {tuple(words[i : i + size]) for i in range(len(words) - size + 1)}


def jaccard(a: set, b: set) -> float:
    """Exact Jaccard similarity (two empty sets: 0, as the stage never matches them)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def edited(
    words: list[str], edits: int, rng: random.Random, vocabulary: Sequence[str]
) -> list[str]:
    """``words`` after ``edits`` random insertions, deletions and substitutions."""
    out = list(words)
    for _ in range(edits):
        kind = rng.random()
        at = rng.randrange(max(len(out), 1))
        if kind < 1 / 3 and out:
            out[at] = rng.choice(vocabulary)
        elif kind < 2 / 3 and len(out) > 1:
            del out[at]
        else:
            out.insert(at, rng.choice(vocabulary))
    return out


def near_copy(
    text: str, target: float, size: int, seed: int, vocabulary: Sequence[str]
) -> tuple[str, float]:
    """A copy of ``text`` edited until its shingles' Jaccard similarity to the original is about
    ``target`` (the fewest edits that reach it or go below), and that exact similarity."""
    words = text.split()
    base = shingle_set(text, size)
    lo, hi = 0, max(len(words), 1)

    def attempt(k: int) -> tuple[str, float]:
        copy = " ".join(edited(words, k, random.Random(seed), vocabulary))
        return copy, jaccard(base, shingle_set(copy, size))

    while lo < hi:  # the fewest edits whose copy is at or under the target
        mid = (lo + hi) // 2
        if attempt(mid)[1] <= target:
            hi = mid
        else:
            lo = mid + 1
    below, above = attempt(lo), attempt(max(lo - 1, 0))
    return min((below, above), key=lambda c: abs(c[1] - target))


@dataclass(frozen=True)
class Planted:
    """A corpus: the originals first, then the copies; ``copies[i]`` = (index of the copy,
    index of its original, its exact similarity, its target)."""

    texts: list[str]
    copies: list[tuple[int, int, float, float]]


def planted(originals: Sequence[str], per_level: int, size: int = 5, seed: int = 0) -> Planted:
    """``per_level`` copies of distinct originals at each of LEVELS, after all the originals."""
    rng = random.Random(seed)
    vocabulary = sorted({w for t in originals[:200] for w in t.split()}) or ["word"]
    texts = list(originals)
    copies = []
    chosen = rng.sample(range(len(originals)), per_level * len(LEVELS))
    for n, original in enumerate(chosen):
        target = LEVELS[n // per_level]
        copy, exact = near_copy(originals[original], target, size, seed * 100_003 + n, vocabulary)
        copies.append((len(texts), original, exact, target))
        texts.append(copy)
    return Planted(texts, copies)


def generated(n: int, words: int = 120, vocabulary: int = 3000, seed: int = 0) -> list[str]:
    """``n`` documents of about ``words`` words drawn from a Zipf-like vocabulary (for tests; the
    benchmark uses real text)."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(vocabulary)]
    weights = [1 / (i + 1) for i in range(vocabulary)]
    return [
        " ".join(rng.choices(vocab, weights, k=rng.randint(words // 2, words * 3 // 2)))
        for _ in range(n)
    ]
