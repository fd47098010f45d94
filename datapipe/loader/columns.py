"""One field of a batch as it is gathered: byte ranges of mapped shards (tar), or decoded objects (TFRecord).

Keeping ranges lets the collators work per batch: the ragged collator copies the ranges
straight from the map into one buffer, with no bytes object per sample.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Column:
    """Payloads of one field for a batch of ``n`` samples, filled part by part (one part per shard)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._parts: list[tuple[np.ndarray, Any, np.ndarray | None, np.ndarray | None]] = []

    def add_spans(self, slots: np.ndarray, buffer: memoryview, offsets: np.ndarray, sizes: np.ndarray) -> None:
        """Payloads at ``offsets``/``sizes`` of ``buffer`` go to batch positions ``slots``."""
        self._parts.append((slots, buffer, offsets, sizes))

    def add_objects(self, slots: np.ndarray, payloads: list[Any]) -> None:
        """Already extracted payloads go to batch positions ``slots``."""
        self._parts.append((slots, payloads, None, None))

    def values(self) -> list[Any]:
        """Every payload in batch order (memoryviews for byte ranges)."""
        items: list[Any] = []
        for _, source, offsets, sizes in self._parts:
            if offsets is None:
                items.extend(source)
            else:
                items.extend([source[a:b] for a, b in zip(offsets.tolist(), (offsets + sizes).tolist(), strict=True)])
        if len(self._parts) == 1 and (self._parts[0][0] == np.arange(self.n)).all():
            return items
        return [items[i] for i in batch_order(self.n, [slots for slots, *_ in self._parts]).tolist()]

    def ragged(self) -> tuple[np.ndarray, np.ndarray]:
        """(all payloads concatenated as uint8, offsets of length n+1) in batch order."""
        sizes = np.zeros(self.n, dtype=np.int64)
        for slots, source, offsets, part_sizes in self._parts:
            sizes[slots] = part_sizes if offsets is not None else [len(p) for p in source]
        bounds = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        joined = bytearray().join(self.values())  # one memcpy per payload, in C
        return np.frombuffer(joined, dtype=np.uint8) if joined else np.zeros(0, np.uint8), bounds


def batch_order(n: int, slots: list[np.ndarray]) -> np.ndarray:
    """For items listed part by part, the position of each batch slot's item."""
    inverse = np.empty(n, dtype=np.int64)
    inverse[np.concatenate(slots)] = np.arange(n)
    return inverse
