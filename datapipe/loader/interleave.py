"""The deterministic interleave of a mix: which source each position of the mixed stream draws from.

The weights become integers ``quota`` summing to ``period`` (the weights as exact fractions where
their common denominator is at most MAX_PERIOD, else rounded to it by largest remainder). One
period is laid out by earliest deadline first: at position p (1-based), among the sources whose
next item is due (``count * period < p * quota``), the one whose deadline ``(count + 1) / quota``
is earliest, ties to the lower index. That keeps every source's count within 1 of
``quota / period * n`` at every prefix n (Tijdeman's chairman assignment), and after a period
every count is exactly its quota, so the layout repeats: a position's source and its rank among
that source's items are arithmetic on the period, with no array over the stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache
from math import lcm

import numpy as np

MAX_PERIOD = 1 << 16


def quotas(weights: Sequence[float]) -> tuple[int, ...]:
    """Integer shares of one period for ``weights`` (non-negative, not all zero), exact where they
    can be."""
    total = sum(Fraction(w).limit_denominator(MAX_PERIOD) for w in weights)
    exact = [Fraction(w).limit_denominator(MAX_PERIOD) / total for w in weights]
    period = lcm(*(f.denominator for f in exact))
    if period <= MAX_PERIOD:
        return tuple(int(f * period) for f in exact)
    # largest remainder: floors, then the biggest remainders get one
    ideal = [f * MAX_PERIOD for f in exact]
    floors = [int(x) for x in ideal]
    for i in sorted(range(len(ideal)), key=lambda i: (floors[i] - ideal[i], i))[
        : MAX_PERIOD - sum(floors)
    ]:
        floors[i] += 1
    return tuple(floors)


@lru_cache(maxsize=16)
def _layout(quota: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(source of each position of one period, its rank among that source's positions in the
    period)."""
    period = sum(quota)
    live = [s for s, q in enumerate(quota) if q]
    counts = [0] * len(quota)
    owner = np.empty(period, dtype=np.int64)
    rank = np.empty(period, dtype=np.int64)
    for p in range(1, period + 1):
        best, best_deadline = -1, 0.0
        for s in live:
            c = counts[s]
            if c * period < p * quota[s]:
                deadline = (c + 1) / quota[s]  # equal fractions give equal doubles: ties are exact
                if best < 0 or deadline < best_deadline:
                    best, best_deadline = s, deadline
        owner[p - 1], rank[p - 1] = best, counts[best]
        counts[best] += 1
    return owner, rank


class Interleave:
    """The mixed stream's positions, source by source, for one set of weights."""

    def __init__(self, weights: Sequence[float]) -> None:
        self.quota = np.array(quotas(weights), dtype=np.int64)
        self.period = int(self.quota.sum())
        self.owner, self.rank = _layout(tuple(self.quota.tolist()))
        prefix = np.zeros((self.period + 1, len(self.quota)), dtype=np.int64)
        prefix[np.arange(1, self.period + 1), self.owner] = 1
        # per source, its positions before each offset of the period
        self._prefix = np.cumsum(prefix, axis=0)
        self._occurrences = [np.flatnonzero(self.owner == s) for s in range(len(self.quota))]

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, index among that source's items) of each stream position (>= 0)."""
        positions = np.asarray(positions, dtype=np.int64)
        rounds, offset = np.divmod(positions, self.period)
        source = self.owner[offset]
        return source, rounds * self.quota[source] + self.rank[offset]

    def position_of(self, source: int, index: np.ndarray) -> np.ndarray:
        """The stream position of item ``index`` of ``source`` (the inverse of ``locate``)."""
        at = self._occurrences[source]
        rounds, r = np.divmod(np.asarray(index, dtype=np.int64), int(self.quota[source]))
        return rounds * self.period + at[r]

    def counts(self, n: int) -> np.ndarray:
        """Items each source contributes to the first ``n`` positions."""
        rounds, offset = divmod(int(n), self.period)
        return rounds * self.quota + self._prefix[offset]
