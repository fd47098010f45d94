"""Shared-memory segments a DataLoader worker packs big batches into, reused once the training
process lets go.

A fresh segment costs a page fault per 4 KiB page on its first write, more than gathering the
payloads into it. So each worker keeps a segment per batch it can have ahead (``slot_table``).
A batch names its (worker, slot); the training process watches the batch's storage through a
weak reference and, once every tensor over it is gone, clears the slot's flag in a small table
shared with the workers; the worker then packs a later batch into the same segment. With every
slot still held (a consumer keeping batches), a worker packs into a fresh segment, not pooled.

Passing a segment costs a socket round trip (torch sends its file descriptor), so a segment crosses
once (``SegmentBatch``): later batches in it name the segment, and the training process views the
one it holds. That leaves a small pickle per batch through the pipe, whatever the batch's size.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import torch
from torch.multiprocessing.reductions import StorageWeakRef

Slot = tuple[int, int] | None  # (worker, slot), or None for a buffer that is not pooled


def new_segment(nbytes: int) -> torch.Tensor:
    """A uint8 tensor over a new shared-memory segment (sent to another process without a copy)."""
    return torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(max(nbytes, 1)))[
        :nbytes
    ]


def slot_table(workers: int, prefetch: int) -> torch.Tensor:
    """The (workers x slots) busy flags, in shared memory; made before the workers start.

    A worker's batches in flight: ``prefetch`` that the DataLoader asks of it ahead, the one being
    packed, the one the training loop holds, and slack for releases seen late (a slot is freed when
    the training process receives its next batch) and the DataLoader's pinning thread.
    """
    return torch.zeros((workers, max(prefetch, 1) + 4), dtype=torch.uint8).share_memory_()


class SegmentBatch:
    """A batch in a pooled segment, as it crosses to the training process, where it unpickles as a
    uint8 array.

    Only the first batch of a segment carries the segment; later ones carry its id, and the training
    process takes a view of the segment it kept (``_RECEIVED``): a new numpy array per batch, which
    the batch's tensors refer to, so that ``Releases`` sees when this batch, not the segment, is
    gone.
    """

    __slots__ = ("segment_id", "nbytes", "segment")

    def __init__(
        self, segment_id: tuple[str, int, int, int], nbytes: int, segment: torch.Tensor | None
    ) -> None:
        self.segment_id, self.nbytes, self.segment = segment_id, nbytes, segment

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _receive, (self.segment_id, self.nbytes, self.segment)


# segment id -> the segment, in the training process
_RECEIVED: dict[tuple[str, int, int, int], np.ndarray] = {}


def _receive(
    segment_id: tuple[str, int, int, int], nbytes: int, segment: torch.Tensor | None
) -> np.ndarray:
    if segment is not None:
        token, worker, slot, made = segment_id
        # the segment it replaces (batches keep their views)
        _RECEIVED.pop((token, worker, slot, made - 1), None)
        # (numpy keeps the tensor, and so the mapping, alive)
        _RECEIVED[segment_id] = segment.numpy()
    return _RECEIVED[segment_id][:nbytes]  # a new array object per batch: Releases watches it


def forget_segments(token: str) -> None:
    """Drop the training process's hold on the segments of one DataLoader run (ids start with its
    token)."""
    for segment_id in [k for k in _RECEIVED if k[0] == token]:
        del _RECEIVED[segment_id]


class WorkerSegments:
    """One worker's pool: ``allocate`` gives a segment whose slot the training process has
    released."""

    def __init__(self, table: torch.Tensor, worker: int, token: str = "") -> None:
        self.busy = table.numpy()[worker]
        self.worker, self.token = worker, token
        self.segments: list[torch.Tensor | None] = [None] * len(self.busy)
        # numpy views of the segments
        self.arrays: list[np.ndarray | None] = [None] * len(self.busy)
        self.ids: list[tuple[str, int, int, int]] = [
            (token, worker, slot, 0) for slot in range(len(self.busy))
        ]

    def allocate(self, nbytes: int) -> tuple[tuple[Any, Slot], np.ndarray]:
        """((what to send, its slot), a numpy view to fill) for a batch of ``nbytes`` bytes."""
        for slot in np.flatnonzero(self.busy == 0).tolist():
            segment = self.segments[slot]
            fresh = segment is None or not nbytes <= segment.numel() <= 2 * nbytes
            if fresh:
                segment = self.segments[slot] = new_segment(nbytes)
                self.arrays[slot] = segment.numpy()
                token, worker, _, made = self.ids[slot]
                self.ids[slot] = (token, worker, slot, made + 1)
            self.busy[slot] = 1
            sent = SegmentBatch(self.ids[slot], nbytes, segment if fresh else None)
            return (sent, (self.worker, slot)), self.arrays[slot][:nbytes]
        segment = new_segment(nbytes)
        return (segment, None), segment.numpy()


class Releases:
    """The training process's side: frees a slot once nothing refers to its batch's buffer any
    more."""

    def __init__(self, table: torch.Tensor) -> None:
        self.busy = table.numpy()
        self.pending: list[tuple[Any, tuple[int, int]]] = []

    def track(self, buffer: Any, slot: Slot) -> None:
        """Watch a received batch buffer (a numpy array, or a tensor); released slots are collected
        on each call."""
        still = []
        for alive, (worker, index) in self.pending:
            if alive():
                still.append((alive, (worker, index)))
            else:
                self.busy[worker, index] = 0
        self.pending = still
        if slot is not None:
            if isinstance(buffer, np.ndarray):
                ref = weakref.ref(buffer)
                self.pending.append((lambda: ref() is not None, slot))
            else:
                storage = StorageWeakRef(buffer.untyped_storage())
                self.pending.append((lambda: not storage.expired(), slot))
