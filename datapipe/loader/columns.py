"""One field of a batch as it is gathered: byte ranges of mapped shards (tar), or decoded objects
(TFRecord).

Keeping ranges lets the collators work per batch with numpy: payloads of one size are copied by one
fancy index over a strided window of the map, big ones by a slice copy each (split over threads for
big batches: loader/copies.py), ASCII integers are parsed as a digit matrix; no bytes object per
sample on those paths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from datapipe.loader.copies import copy_payloads

Allocate = Callable[[int], np.ndarray]  # nbytes -> a writable uint8 array of that length

# from this mean size on, one slice copy per payload beats a gather with a temporary
BIG_PAYLOAD = 16 << 10
_MAX_DIGITS = 18  # every 18-digit decimal fits an int64
# significant digits of a decimal parsed as m / 10**k (m < 2**53: exact as a double)
_MAX_DECIMAL = 15
_POW10_INT = 10 ** np.arange(_MAX_DIGITS + 1, dtype=np.int64)
_POW10 = np.array([float(10**k) for k in range(_MAX_DECIMAL + 1)])  # exact doubles


class Column:
    """Payloads of one field for a batch of ``n`` samples, filled part by part (one part per
    shard)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._parts: list[tuple[np.ndarray, Any, np.ndarray | None, np.ndarray | None]] = []

    def add_spans(
        self, slots: np.ndarray, buffer: memoryview, offsets: np.ndarray, sizes: np.ndarray
    ) -> None:
        """Payloads at ``offsets``/``sizes`` of ``buffer`` go to batch positions ``slots``."""
        self._parts.append((slots, buffer, offsets, sizes))

    def add_objects(self, slots: np.ndarray, payloads: list[Any]) -> None:
        """Already extracted payloads go to batch positions ``slots``."""
        self._parts.append((slots, payloads, None, None))

    def spans_only(self) -> bool:
        """Whether every payload is a byte range of a buffer (not an extracted object)."""
        return all(offsets is not None for _, _, offsets, _ in self._parts)

    def values(self) -> list[Any]:
        """Every payload in batch order (memoryviews for byte ranges)."""
        items: list[Any] = []
        for _, source, offsets, sizes in self._parts:
            if offsets is None:
                items.extend(source)
            else:
                items.extend(
                    [
                        source[a:b]
                        for a, b in zip(offsets.tolist(), (offsets + sizes).tolist(), strict=True)
                    ]
                )
        if len(self._parts) == 1 and (self._parts[0][0] == np.arange(self.n)).all():
            return items
        return [
            items[i] for i in batch_order(self.n, [slots for slots, *_ in self._parts]).tolist()
        ]

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
        if self.spans_only() and sizes.min() == sizes.max() and total // self.n < BIG_PAYLOAD:
            self.rows(0, total // self.n, lambda _: out)
        elif self.spans_only() and total // self.n >= BIG_PAYLOAD:
            copy_payloads(
                out,
                [
                    (source, bounds[slots].tolist(), offsets.tolist(), part_sizes.tolist())
                    for slots, source, offsets, part_sizes in self._parts
                ],
            )
        else:  # small payloads of mixed sizes, or objects: one memcpy each in C
            out[:] = np.frombuffer(bytearray().join(self.values()), dtype=np.uint8)
        return out, bounds

    def bytes_list(self) -> list[Any]:
        """Every payload as bytes in batch order, one copy each (decoded objects, TFRecord's arrays,
        as they are).

        Small payloads of one size are gathered as rows and made bytes by numpy in C
        (``rows_as_bytes``); others by a slice copy each, which for big payloads is all the time
        there is."""
        if self.n and self.spans_only():
            sizes = self.sizes()
            width = int(sizes[0])
            if 0 < width < BIG_PAYLOAD and sizes.min() == sizes.max():
                return rows_as_bytes(self.rows(0, width))
        return [bytes(p) if not isinstance(p, np.ndarray) else p for p in self.values()]

    def uniform_size(self) -> int | None:
        """The payload size when every payload is a byte range of that one size, else None."""
        if not self.n or not self.spans_only():
            return None
        sizes = self.sizes()
        return int(sizes[0]) if sizes.min() == sizes.max() else None

    def head(self, width: int) -> bytes:
        """The first ``width`` bytes of one payload (byte ranges only)."""
        _, source, offsets, _ = next(part for part in self._parts if len(part[0]))
        start = int(offsets[0])
        return bytes(np.frombuffer(source, dtype=np.uint8)[start : start + width])

    def all_start_with(self, prefix: bytes) -> bool:
        """Whether every payload starts with ``prefix`` (byte ranges only): one comparison per
        shard."""
        expected = np.frombuffer(prefix, dtype=np.uint8)
        return all(
            not len(offsets) or bool((_windows(source, len(prefix))[offsets] == expected).all())
            for _, source, offsets, _ in self._parts
        )

    def rows(self, skip: int, width: int, allocate: Allocate | None = None) -> np.ndarray:
        """Bytes [skip, skip + width) of every payload (byte ranges only), as an (n, width) uint8
        array in batch order: one fancy index per shard over a window view of its map, or a slice
        copy per payload when big."""
        out = (
            allocate(self.n * width)
            if allocate is not None
            else np.empty(self.n * width, dtype=np.uint8)
        )
        rows = out.reshape(self.n, width)
        if width >= BIG_PAYLOAD:
            copy_payloads(
                out,
                [
                    (
                        source,
                        (slots * width).tolist(),
                        (offsets + skip).tolist(),
                        [width] * len(slots),
                    )
                    for slots, source, offsets, _ in self._parts
                ],
            )
            return rows
        for slots, source, offsets, _ in self._parts:
            _put(rows, slots, _gather(source, offsets + skip, width))
        return rows

    def integers(self) -> np.ndarray | None:
        """The payloads as int64 when every one is 1-18 ASCII digits (a .cls label), else None."""
        if not self.spans_only():
            return None
        values = np.empty(self.n, dtype=np.int64)
        for slots, source, offsets, sizes in self._parts:
            if not len(sizes):
                continue
            width = int(sizes.max())
            if not 1 <= sizes.min() <= width <= _MAX_DIGITS or int(offsets.max()) + width > len(
                source
            ):
                return None
            digits = _gather(source, offsets, width) - np.uint8(ord("0"))  # non-digits wrap above 9
            if width == int(sizes.min()):  # one width (labels 0-9, say): no masking
                if (digits > 9).any():
                    return None
                values[slots] = digits[:, 0] if width == 1 else digits @ _POW10_INT[width - 1 :: -1]
                continue
            inside = np.arange(width) < sizes[:, None]
            if ((digits > 9) & inside).any():
                return None
            powers = np.where(
                inside, 10 ** np.clip(sizes[:, None] - 1 - np.arange(width), 0, None), 0
            )
            values[slots] = (digits.astype(np.int64) * powers).sum(axis=1)
        return values

    def strings(self) -> np.ndarray | None:
        """The payloads as one fixed-width bytes array (numpy 'S', NUL-padded) in batch order; None
        for objects, or when a payload holds a NUL (that the 'S' dtype would drop)."""
        if not self.n or not self.spans_only():
            return None
        sizes = self.sizes()
        width = int(sizes.max())
        if width == 0:
            return None
        chars = np.empty((self.n, width), dtype=np.uint8)
        for slots, source, offsets, part_sizes in self._parts:
            if len(slots):
                chars[slots] = _aligned(source, offsets, part_sizes, width, right=False)
        outside = np.arange(width) >= sizes[:, None]
        if not (chars.astype(bool) | outside).all():
            return None
        chars[outside] = 0
        return chars.view(f"S{width}").reshape(self.n)

    def decimals(self) -> np.ndarray | None:
        """The payloads as float64 when every one is a plain decimal ([-+]digits[.digits], 1-15
        digits), else None.

        Parsed as a matrix of right-aligned characters (one matrix product for the digits): the
        mantissa m < 10**15 < 2**53 and 10**k (k <= 15) are exact doubles, so m / 10**k is rounded
        once, correctly, to the same double as float(payload) (Clinger's fast path).
        """
        if not self.n or not self.spans_only():
            return None
        sizes = self.sizes()
        width = int(sizes.max())
        if sizes.min() < 1 or width > _MAX_DECIMAL + 2:
            return None
        chars = np.empty((self.n, width), dtype=np.uint8)
        for slots, source, offsets, part_sizes in self._parts:
            if len(slots):
                chars[slots] = _aligned(source, offsets, part_sizes, width, right=True)
        # lead: the column of each payload's first character
        rows, lead = np.arange(self.n), width - sizes
        first = chars[rows, lead]
        negative = first == ord("-")
        signed = negative | (first == ord("+"))
        inside = np.arange(width) >= lead[:, None]
        # digits 0-9; '.' wraps to 254, other characters elsewhere
        codes = chars - np.uint8(ord("0"))
        is_digit = (codes <= 9) & inside
        is_dot = (codes == np.uint8(ord(".") - ord("0") + 256)) & inside
        valid = is_digit | is_dot | ~inside
        valid[rows, lead] |= signed
        dots = np.add.reduce(is_dot.view(np.uint8), axis=1)
        count = sizes - dots - signed
        if not valid.all() or dots.max() > 1 or count.min() < 1 or count.max() > _MAX_DECIMAL:
            return None
        # every digit, the dot's column counting as a 0
        whole = (codes * is_digit) @ _POW10_INT[width - 1 :: -1]
        frac = np.where(dots > 0, width - 1 - is_dot.argmax(axis=1), 0)  # digits right of the dot
        # those digits' value (the dot's 0 above)
        below = np.where(dots > 0, whole % _POW10_INT[frac + 1], 0)
        mantissa = (whole - below) // np.where(dots > 0, 10, 1) + below
        values = mantissa / _POW10[frac]
        return np.where(negative, -values, values)


def rows_as_bytes(rows: np.ndarray) -> list[bytes]:
    """One bytes object per row of a C-contiguous (n, width) uint8 array, made in C by numpy's
    fixed-width bytes type; it drops trailing NULs, so rows that end in one are copied again,
    whole."""
    n, width = rows.shape
    if width == 0:
        return [b""] * n
    out = rows.view(f"S{width}").reshape(n).tolist()
    for i in np.flatnonzero(rows[:, -1] == 0).tolist():
        out[i] = rows[i].tobytes()
    return out


def payload_bytes(data: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    """Payload i as bytes, ``data[offsets[i]:offsets[i+1]]`` (a ragged pair of uint8 data and n+1
    offsets): one copy each, in C when they all have one size."""
    n = len(offsets) - 1
    if n <= 0:
        return []
    first, last = int(offsets[0]), int(offsets[-1])
    width = (last - first) // n
    if width * n == last - first and bool((offsets[1:] - offsets[:-1] == width).all()):
        return rows_as_bytes(np.ascontiguousarray(data[first:last]).reshape(n, width))
    view = memoryview(data)
    bounds = offsets.tolist()
    return [view[a:b].tobytes() for a, b in zip(bounds[:-1], bounds[1:], strict=False)]


def _aligned(
    source: Any, offsets: np.ndarray, sizes: np.ndarray, width: int, right: bool
) -> np.ndarray:
    """Rows of ``width`` bytes starting (or, ``right``, ending) where each payload does; the other
    bytes of a row are anything: a window view of the map, or a gather into zero-padded rows near
    the buffer's ends."""
    starts = offsets + sizes - width if right else offsets
    if int(starts.min()) >= 0 and int(starts.max()) + width <= memoryview(source).nbytes:
        return _windows(source, width)[starts]
    rows = np.zeros((len(offsets), width), dtype=np.uint8)
    within = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    columns = np.repeat(width - sizes, sizes) + within if right else within
    rows[np.repeat(np.arange(len(offsets)), sizes), columns] = np.frombuffer(
        source, dtype=np.uint8
    )[np.repeat(offsets, sizes) + within]
    return rows


def _gather(source: Any, offsets: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each of ``offsets`` of ``source``, as rows. Evenly spaced offsets
    (consecutive samples of one layout, as unshuffled reads give) are a strided view, which numpy
    copies faster than it gathers rows by a fancy index."""
    if len(offsets) > 1:
        step = int(offsets[1] - offsets[0])
        first, last = int(offsets[0]), int(offsets[-1])
        if (
            step >= 0
            and last == first + step * (len(offsets) - 1)
            and ((offsets[1:] - offsets[:-1]) == step).all()
            and first >= 0
            and last + width <= memoryview(source).nbytes
        ):
            view = np.ndarray(
                (len(offsets), width),
                dtype=np.uint8,
                buffer=source,
                offset=first,
                strides=(step, 1),
            )
            view.flags.writeable = False
            return view
    return _windows(source, width)[offsets]


def _put(rows: np.ndarray, slots: np.ndarray, values: np.ndarray) -> None:
    """``rows[slots] = values``, as a slice assignment when ``slots`` is a run (one shard's part of
    a batch)."""
    first = int(slots[0]) if len(slots) else 0
    if (
        len(slots)
        and int(slots[-1]) == first + len(slots) - 1
        and ((slots[1:] - slots[:-1]) == 1).all()
    ):
        rows[first : first + len(slots)] = values
    else:
        rows[slots] = values


def _windows(source: Any, width: int) -> np.ndarray:
    """Every ``width``-byte window of ``source`` as rows of a 2-D view (row i starts at byte i); no
    copy."""
    # np.ndarray over the buffer, not numpy's as_strided: the same view for a tenth of the Python
    # overhead
    size = memoryview(source).nbytes
    view = np.ndarray((size - width + 1, width), dtype=np.uint8, buffer=source, strides=(1, 1))
    view.flags.writeable = False
    return view


def batch_order(n: int, slots: list[np.ndarray]) -> np.ndarray:
    """For items listed part by part, the position of each batch slot's item."""
    inverse = np.empty(n, dtype=np.int64)
    inverse[np.concatenate(slots)] = np.arange(n)
    return inverse
