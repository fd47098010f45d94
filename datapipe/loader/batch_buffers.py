"""One buffer per batch: every numeric array of a batch, and its payload lists, packed into a single
uint8 array.

A DataLoader worker hands each tensor to the training process through its own shared-memory
segment, and that costs more per tensor than the copy; packing makes it one segment per
batch. Arrays start at 64-byte boundaries so that views of any dtype are aligned. Fields of
bytes, str or json payloads (deferred as ``Ragged``) travel as their raw bytes and offsets in
the buffer, not pickled, and ``unpack`` makes the lists again: one copy of each payload out
of the buffer, so that nothing of the batch keeps the buffer (a pooled segment) alive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from datapipe.loader.collate import Images, Ragged, decode_payloads

ALIGN = 64
# (name, "array" | "tuple" | "payloads" | "object", spec or value)
Layout = list[tuple[str, str, Any]]
# nbytes -> (the buffer to hand on, a uint8 numpy view of it)
Allocate = Callable[[int], tuple[Any, np.ndarray]]


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _numeric(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind in "biuf"


def _heap(nbytes: int) -> tuple[np.ndarray, np.ndarray]:
    buffer = np.empty(nbytes, dtype=np.uint8)
    return buffer, buffer


def pack(batch: dict[str, Any], allocate: Allocate = _heap) -> tuple[Any, Layout]:
    """(buffer, layout): numeric arrays (and tuples of them) copied into one buffer, other values in
    ``layout``.

    ``allocate(nbytes)`` gives (what to return as the buffer, a uint8 numpy view to fill): shared
    memory, say. ``Ragged`` fields are gathered straight into it, so their payloads are copied once;
    a "ragged" one unpacks as (data, offsets), one of another decoder as that decoder's list.
    """
    layout: Layout = []
    arrays: list[tuple[int, np.ndarray]] = []
    ragged: list[tuple[int, int, Ragged]] = []  # (data start, offsets start, field)
    images: list[tuple[int, Images]] = []  # (start, field): decoded straight into the buffer
    total = 0

    def place(nbytes: int, dtype: str, shape: tuple[int, ...]) -> tuple[int, str, tuple[int, ...]]:
        nonlocal total
        start = total
        total = _align(start + nbytes)
        return start, dtype, shape

    def place_array(array: np.ndarray) -> tuple[int, str, tuple[int, ...]]:
        spec = place(array.nbytes, array.dtype.str, array.shape)
        arrays.append((spec[0], array))
        return spec

    for name, value in batch.items():
        if _numeric(value):
            layout.append((name, "array", place_array(value)))
        elif isinstance(value, tuple) and value and all(_numeric(v) for v in value):
            layout.append((name, "tuple", [place_array(v) for v in value]))
        elif isinstance(value, Images):
            spec = place(
                value.nbytes, value.spec.numpy_dtype.str, (value.column.n, *value.spec.shape)
            )
            images.append((spec[0], value))
            layout.append((name, "array", spec))
        elif isinstance(value, Ragged):
            n, size = value.column.n, int(value.column.sizes().sum())
            specs = [
                place(size, "|u1", (size,)),
                place(8 * (n + 1), np.dtype(np.int64).str, (n + 1,)),
            ]
            ragged.append((specs[0][0], specs[1][0], value))
            layout.append(
                (name, "tuple", specs)
                if value.decoder == "ragged"
                else (name, "payloads", (value.decoder, specs))
            )
        else:
            layout.append((name, "object", value))
    handle, buffer = allocate(total)
    _fill(buffer, arrays, images, ragged)
    return handle, layout


def _fill(
    buffer: np.ndarray,
    arrays: list[tuple[int, np.ndarray]],
    images: list[tuple[int, Images]],
    ragged: list[tuple[int, int, Ragged]],
) -> None:
    """Copy each placed value into ``buffer`` at its start: arrays, images decoded there, ragged
    payloads gathered there with their offsets."""
    for start, array in arrays:
        buffer[start : start + array.nbytes] = (
            np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        )
    for start, field in images:
        field.into(buffer[start : start + field.nbytes])
    for data_start, offsets_start, field in ragged:
        _, bounds = field.column.ragged(lambda nbytes, at=data_start: buffer[at : at + nbytes])
        buffer[offsets_start : offsets_start + bounds.nbytes] = bounds.view(np.uint8)


def unpack(
    buffer: Any, layout: Layout, view: Callable[[Any, int, str, tuple[int, ...]], Any]
) -> dict[str, Any]:
    """The batch again; ``view(buffer, start, dtype, shape)`` makes an array (or tensor) view of the
    buffer.

    ``buffer`` is a uint8 numpy array or anything with ``.numpy()`` giving one (a CPU tensor)."""
    batch: dict[str, Any] = {}
    for name, kind, spec in layout:
        if kind == "array":
            batch[name] = view(buffer, *spec)
        elif kind == "tuple":
            batch[name] = tuple(view(buffer, *s) for s in spec)
        elif kind == "payloads":
            decoder, (data, offsets) = spec
            array = buffer if isinstance(buffer, np.ndarray) else buffer.numpy()
            batch[name] = decode_payloads(
                numpy_view(array, *data), numpy_view(array, *offsets), decoder
            )
        else:
            batch[name] = spec
    return batch


def numpy_view(buffer: np.ndarray, start: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A numpy view of ``buffer`` (for tests and torch-free use)."""
    count = int(np.prod(shape)) if shape else 1
    return buffer[start : start + count * np.dtype(dtype).itemsize].view(dtype).reshape(shape)
