"""Batches as tensors: numpy arrays shared as tensors, views of a packed buffer, page-locked
buffers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch


def _tensor(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return torch.from_numpy(value)
    if isinstance(value, tuple):  # ragged (data, offsets)
        return tuple(_tensor(v) for v in value)
    return value


def to_tensors(batch: dict[str, Any]) -> dict[str, Any]:
    """Numeric numpy arrays become tensors (sharing memory); keys, strings and bytes stay lists."""
    return {k: _tensor(v) for k, v in batch.items()}


def can_pin() -> bool:
    """Whether page-locked host memory can be had (it is CUDA's; without a device, pinning is
    skipped)."""
    return torch.cuda.is_available()


def pinned_buffer(nbytes: int) -> tuple[torch.Tensor, np.ndarray]:
    """A page-locked buffer (torch's host allocator caches and reuses them) and a numpy view to
    fill."""
    tensor = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    return tensor, tensor.numpy()


_DTYPES: dict[str, tuple[torch.dtype, int]] = {}  # numpy dtype string -> (torch dtype, item size)


def tensor_view(
    buffer: torch.Tensor | np.ndarray, start: int, dtype: str, shape: tuple[int, ...]
) -> torch.Tensor:
    """A view of the batch buffer with the given numpy dtype and shape (runs per field per batch:
    kept cheap)."""
    known = _DTYPES.get(dtype)
    if known is None:
        known = _DTYPES[dtype] = (
            torch.from_numpy(np.empty(0, dtype=dtype)).dtype,
            np.dtype(dtype).itemsize,
        )
    torch_dtype, itemsize = known
    count = math.prod(shape)
    # one call instead of a slice and a view; its storage keeps the array
    if isinstance(buffer, np.ndarray):
        view = (
            torch.frombuffer(buffer, dtype=torch_dtype, count=count, offset=start)
            if count
            else torch.empty(0, dtype=torch_dtype)
        )
    else:
        view = buffer[start : start + count * itemsize].view(torch_dtype)
    return view if len(shape) == 1 else view.reshape(shape)
