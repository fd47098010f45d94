"""One buffer per batch: every numeric array of a batch packed into a single uint8 array.

A DataLoader worker hands each tensor to the training process through its own shared-memory
segment, and that costs more per tensor than the copy; packing makes it one segment per
batch. Arrays start at 64-byte boundaries so that views of any dtype are aligned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

ALIGN = 64
Layout = list[tuple[str, str, Any]]  # (name, "array" | "tuple" | "object", spec or value)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _numeric(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind in "biuf"


def pack(batch: dict[str, Any]) -> tuple[np.ndarray, Layout]:
    """(buffer, layout): numeric arrays (and tuples of them) copied into ``buffer``, other values in ``layout``."""
    layout: Layout = []
    arrays: list[tuple[int, np.ndarray]] = []
    total = 0

    def place(array: np.ndarray) -> tuple[int, str, tuple[int, ...]]:
        nonlocal total
        start = total
        arrays.append((start, array))
        total = _align(start + array.nbytes)
        return start, array.dtype.str, array.shape

    for name, value in batch.items():
        if _numeric(value):
            layout.append((name, "array", place(value)))
        elif isinstance(value, tuple) and value and all(_numeric(v) for v in value):
            layout.append((name, "tuple", [place(v) for v in value]))
        else:
            layout.append((name, "object", value))
    buffer = np.empty(total, dtype=np.uint8)
    for start, array in arrays:
        buffer[start : start + array.nbytes] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return buffer, layout


def unpack(buffer: Any, layout: Layout, view: Callable[[Any, int, str, tuple[int, ...]], Any]) -> dict[str, Any]:
    """The batch again; ``view(buffer, start, dtype, shape)`` makes an array (or tensor) view of the buffer."""
    batch: dict[str, Any] = {}
    for name, kind, spec in layout:
        if kind == "array":
            batch[name] = view(buffer, *spec)
        elif kind == "tuple":
            batch[name] = tuple(view(buffer, *s) for s in spec)
        else:
            batch[name] = spec
    return batch


def numpy_view(buffer: np.ndarray, start: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A numpy view of ``buffer`` (for tests and torch-free use)."""
    count = int(np.prod(shape)) if shape else 1
    return buffer[start : start + count * np.dtype(dtype).itemsize].view(dtype).reshape(shape)
