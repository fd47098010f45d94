"""One field of a batch as it is gathered: byte ranges of mapped shards (tar), or decoded objects (TFRecord).

Keeping ranges lets the collators work per batch with numpy: payloads of one size are copied
by one fancy index over a strided window of the map, big ones by a slice copy each (numpy
releases the GIL for both, so a prefetch thread overlaps the consumer), ASCII integers are
parsed as a digit matrix; no bytes object per sample on those paths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Allocate = Callable[[int], np.ndarray]  # nbytes -> a writable uint8 array of that length

BIG_PAYLOAD = 16 << 10  # from this mean size on, one slice copy per payload beats a gather with a temporary
_MAX_DIGITS = 18  # every 18-digit decimal fits an int64


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

    def _spans_only(self) -> bool:
        return all(offsets is not None for _, _, offsets, _ in self._parts)

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

    def sizes(self) -> np.ndarray:
        """Payload sizes in batch order."""
        sizes = np.zeros(self.n, dtype=np.int64)
        for slots, source, offsets, part_sizes in self._parts:
            sizes[slots] = part_sizes if offsets is not None else [len(p) for p in source]
        return sizes

    def ragged(self, allocate: Allocate | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(all payloads concatenated as uint8, offsets of length n+1) in batch order.

        ``allocate`` gives the data array (e.g. in shared memory), so that payloads are copied once.
        """
        sizes = self.sizes()
        bounds = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        total = int(bounds[-1])
        out = allocate(total) if allocate is not None else np.empty(total, dtype=np.uint8)
        if total == 0:
            return out, bounds
        if self._spans_only() and sizes.min() == sizes.max() and total // self.n < BIG_PAYLOAD:
            rows = out.reshape(self.n, total // self.n)  # one size: one gather per shard into a 2-D view
            for slots, source, offsets, _ in self._parts:
                rows[slots] = _windows(source, rows.shape[1])[offsets]
        elif self._spans_only() and total // self.n >= BIG_PAYLOAD:
            for slots, source, offsets, part_sizes in self._parts:
                src = np.frombuffer(source, dtype=np.uint8)
                for start, offset, size in zip(bounds[slots].tolist(), offsets.tolist(), part_sizes.tolist(),
                                               strict=True):
                    out[start : start + size] = src[offset : offset + size]
        else:  # small payloads of mixed sizes, or objects: one memcpy each in C
            out[:] = np.frombuffer(bytearray().join(self.values()), dtype=np.uint8)
        return out, bounds

    def integers(self) -> np.ndarray | None:
        """The payloads as int64 when every one is 1-18 ASCII digits (a .cls label), else None."""
        if not self._spans_only():
            return None
        values = np.empty(self.n, dtype=np.int64)
        for slots, source, offsets, sizes in self._parts:
            if not len(sizes):
                continue
            width = int(sizes.max())
            if not 1 <= sizes.min() <= width <= _MAX_DIGITS or int(offsets.max()) + width > len(source):
                return None
            digits = _windows(source, width)[offsets] - np.uint8(ord("0"))  # non-digits wrap above 9
            if width == int(sizes.min()):  # one width (labels 0-9, say): no masking
                if (digits > 9).any():
                    return None
                values[slots] = digits @ 10 ** np.arange(width - 1, -1, -1)
                continue
            inside = np.arange(width) < sizes[:, None]
            if ((digits > 9) & inside).any():
                return None
            powers = np.where(inside, 10 ** np.clip(sizes[:, None] - 1 - np.arange(width), 0, None), 0)
            values[slots] = (digits.astype(np.int64) * powers).sum(axis=1)
        return values


def _windows(source: Any, width: int) -> np.ndarray:
    """Every ``width``-byte window of ``source`` as rows of a 2-D view (row i starts at byte i); no copy."""
    # np.ndarray over the buffer, not numpy's as_strided: the same view for a tenth of the Python overhead
    size = memoryview(source).nbytes
    view = np.ndarray((size - width + 1, width), dtype=np.uint8, buffer=source, strides=(1, 1))
    view.flags.writeable = False
    return view


def batch_order(n: int, slots: list[np.ndarray]) -> np.ndarray:
    """For items listed part by part, the position of each batch slot's item."""
    inverse = np.empty(n, dtype=np.int64)
    inverse[np.concatenate(slots)] = np.arange(n)
    return inverse
