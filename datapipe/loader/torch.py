"""The torch adapter: ShardDataset (an IterableDataset of ready batches), DataLoader wiring, tensors, DDP world.

The only module of datapipe that imports torch. Batches are collated inside the DataLoader
workers and cross to the main process as one packed buffer each (loader/packing.py), not as
per-sample objects: pickled through the worker's pipe when small, else in shared memory.

Shared-memory segments are reused (``WorkerSegments``, ``Releases``): a fresh one costs a page
fault per 4 KiB page on its first write (about 1 GB/s on our VMs), more than gathering the
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

import fcntl
import math
import os
import pickle
import secrets
import traceback
import weakref
from collections.abc import Iterator, Mapping, Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.distributed as dist
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from datapipe.errors import ConfigError, DatapipeError
from datapipe.loader import copies
from datapipe.loader.batches import BatchSource
from datapipe.loader.collate import Decoder
from datapipe.loader.dataset import Dataset, open_dataset
from datapipe.loader.packing import pack, unpack
from datapipe.loader.prefetch import prefetch as prefetched
from datapipe.loader.schedule import DEFAULT_BLOCK_SHARDS, DropLast, worker_steps
from datapipe.loader.settings import LoaderSettings
from datapipe.loader.world import resolve_world

PIPE_LIMIT = 64 << 10  # bytes of a packed batch below which workers pickle it rather than share memory
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux
Slot = tuple[int, int] | None  # (worker, slot), or None for a buffer that is not pooled


class WorkerFailure:
    """A datapipe error of a worker, sent as an item so that the training process raises it as itself.

    (The DataLoader would re-raise it as RuntimeError("Caught ShardCorruptError ...") with the worker's traceback as
    text; the Loader raises the original class, with its attributes, and that traceback as a note.)
    """

    def __init__(self, error: DatapipeError, worker: int) -> None:
        error.add_note(f"raised in DataLoader worker {worker}:\n{traceback.format_exc().rstrip()}")
        self.error = error


def new_segment(nbytes: int) -> torch.Tensor:
    """A uint8 tensor over a new shared-memory segment (sent to another process without a copy)."""
    return torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(max(nbytes, 1)))[:nbytes]


def slot_table(workers: int, prefetch: int) -> torch.Tensor:
    """The (workers x slots) busy flags, in shared memory; made before the workers start.

    A worker's batches in flight: ``prefetch`` that the DataLoader asks of it ahead, the one being packed,
    the one the training loop holds, and slack for releases seen late (a slot is freed when the training
    process receives its next batch) and the DataLoader's pinning thread.
    """
    return torch.zeros((workers, max(prefetch, 1) + 4), dtype=torch.uint8).share_memory_()


class SegmentBatch:
    """A batch in a pooled segment, as it crosses to the training process, where it unpickles as a uint8 array.

    Only the first batch of a segment carries the segment; later ones carry its id, and the training
    process takes a view of the segment it kept (``_RECEIVED``): a new numpy array per batch, which
    the batch's tensors refer to, so that ``Releases`` sees when this batch, not the segment, is gone.
    """

    __slots__ = ("segment_id", "nbytes", "segment")

    def __init__(self, segment_id: tuple[str, int, int, int], nbytes: int, segment: torch.Tensor | None) -> None:
        self.segment_id, self.nbytes, self.segment = segment_id, nbytes, segment

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _receive, (self.segment_id, self.nbytes, self.segment)


_RECEIVED: dict[tuple[str, int, int, int], np.ndarray] = {}  # segment id -> the segment, in the training process


def _receive(segment_id: tuple[str, int, int, int], nbytes: int, segment: torch.Tensor | None) -> np.ndarray:
    if segment is not None:
        token, worker, slot, made = segment_id
        _RECEIVED.pop((token, worker, slot, made - 1), None)  # the segment it replaces (batches keep their views)
        _RECEIVED[segment_id] = segment.numpy()  # (numpy keeps the tensor, and so the mapping, alive)
    return _RECEIVED[segment_id][:nbytes]  # a new array object per batch: Releases watches it


def forget_segments(token: str) -> None:
    """Drop the training process's hold on the segments of one DataLoader run (ids start with its token)."""
    for segment_id in [k for k in _RECEIVED if k[0] == token]:
        del _RECEIVED[segment_id]


class WorkerSegments:
    """One worker's pool: ``allocate`` gives a segment whose slot the training process has released."""

    def __init__(self, table: torch.Tensor, worker: int, token: str = "") -> None:
        self.busy = table.numpy()[worker]
        self.worker, self.token = worker, token
        self.segments: list[torch.Tensor | None] = [None] * len(self.busy)
        self.arrays: list[np.ndarray | None] = [None] * len(self.busy)  # numpy views of the segments
        self.ids: list[tuple[str, int, int, int]] = [(token, worker, slot, 0) for slot in range(len(self.busy))]

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
    """The training process's side: frees a slot once nothing refers to its batch's buffer any more."""

    def __init__(self, table: torch.Tensor) -> None:
        self.busy = table.numpy()
        self.pending: list[tuple[Any, tuple[int, int]]] = []

    def track(self, buffer: Any, slot: Slot) -> None:
        """Watch a received batch buffer (a numpy array, or a tensor); released slots are collected on each call."""
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


def distributed_world() -> tuple[int, int] | None:
    """(rank, world size) of the initialised default process group, else None."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def _tensor(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return torch.from_numpy(value)
    if isinstance(value, tuple):  # ragged (data, offsets)
        return tuple(_tensor(v) for v in value)
    return value


def to_tensors(batch: dict[str, Any]) -> dict[str, Any]:
    """Numeric numpy arrays become tensors (sharing memory); keys, strings and bytes stay lists."""
    return {k: _tensor(v) for k, v in batch.items()}


class Packed(NamedTuple):
    """What a worker yields for the Loader: one batch packed in one buffer (or a failure)."""

    buffer: Any  # worker side: uint8 numpy array (pickled), SegmentBatch or a tensor (shared memory), or WorkerFailure
    layout: Any
    slot: Any

    def pin_memory(self, device: Any = None) -> Packed:
        """The DataLoader's pinning thread calls this (it would pass numpy buffers by unpinned): a copy of the
        buffer in page-locked memory, made off the training loop's thread."""
        if isinstance(self.buffer, WorkerFailure):
            return self
        buffer = torch.from_numpy(self.buffer) if isinstance(self.buffer, np.ndarray) else self.buffer
        return self._replace(buffer=buffer.pin_memory())


class ShardDataset(IterableDataset):
    """The batches of one rank and epoch, split across DataLoader workers round-robin by batch.

    Use with ``DataLoader(ds, batch_size=None, num_workers=N)``; each item is a whole batch.
    Build one with the same arguments as ``datapipe.Loader``, or let the Loader make it.
    """

    packed = False  # Loader-internal: yield (one uint8 buffer, layout, slot) per batch; see loader/packing.py
    slots: torch.Tensor | None = None  # Loader-internal: the shared-memory slot table (WorkerSegments)
    token = ""  # Loader-internal: names this DataLoader run's segments (SegmentBatch)
    pinned = False  # Loader-internal, in process: batches gathered into page-locked memory (pin_memory)

    def __init__(self, dataset: str | Dataset, batch_size: int = 256, *, shuffle: bool = True, seed: int = 0,
                 epoch: int = 0, rank: int | None = None, world_size: int | None = None, drop_last: DropLast = True,
                 fields: Sequence[str] | None = None, decode: Mapping[str, Decoder] | None = None,
                 prefetch: int | None = None, block_shards: int = DEFAULT_BLOCK_SHARDS,
                 position: int = 0) -> None:
        settings = LoaderSettings(batch_size, shuffle, seed, drop_last, block_shards, fields, decode, prefetch=prefetch)
        dataset = open_dataset(dataset)
        dataset.check_shards()
        world = resolve_world(rank, world_size, os.environ, distributed_world)
        self.source = BatchSource(dataset, settings, world, epoch, position)
        self.num_batches = self.source.plan.num_batches()
        self.prefetch = settings.prefetch  # a thread ahead in each process only if asked: DataLoader prefetches

    @classmethod
    def from_source(cls, source: BatchSource, num_batches: int, prefetch: int, packed: bool = False) -> ShardDataset:
        """A ShardDataset over an existing batch source (what the Loader uses)."""
        ds = cls.__new__(cls)
        ds.source, ds.num_batches, ds.prefetch, ds.packed = source, num_batches, prefetch, packed
        return ds

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if info is not None:  # the DataLoader's workers use the cores already
            copies.set_threads(1)
        steps = worker_steps(self.num_batches, worker, workers)
        if self.packed:
            segments = WorkerSegments(self.slots, worker, self.token) if self.slots is not None else None

            def allocate(nbytes: int) -> tuple[Any, np.ndarray]:
                # big batches are packed straight into a pooled shared-memory segment and cross as its name;
                # small ones as a pickled copy, which costs about as little
                if nbytes < PIPE_LIMIT or segments is None:
                    buffer = np.empty(nbytes, dtype=np.uint8)
                    return (buffer, None), buffer
                return segments.allocate(nbytes)

            def packed(batch: dict[str, Any]) -> tuple[Any, bytes]:
                handle, layout = pack(batch, allocate)
                return handle, _pickled_layout(layout)

            try:  # no thread ahead here: the DataLoader asks each worker for `prefetch` batches ahead already,
                # and a second thread in the worker only contended for its GIL (~1/4 of a W1 worker's time)
                for (buffer, slot), layout in self.source.produce(steps, packed, True):
                    yield Packed(buffer, layout, slot)
            except DatapipeError as e:
                if info is None or not _picklable(e):
                    raise
                yield Packed(WorkerFailure(e, worker), None, None)
        elif self.pinned:  # gathered straight into page-locked memory: one copy, ahead
            for buffer, layout in prefetched(self.source.produce(steps, lambda b: pack(b, _pinned_buffer), True),
                                             self.prefetch):
                yield unpack(buffer, layout, _tensor_view)
        else:
            batches = prefetched(self.source.produce(steps, to_tensors), self.prefetch)  # tensors made ahead too
            # in a user's own DataLoader: a batch its queue thread cannot pickle would be dropped, and waited for
            yield from batches if info is None else map(_sendable, batches)


def iterate(source: BatchSource, num_batches: int, num_workers: int, prefetch: int,
            pin_memory: bool = False) -> Iterator[dict[str, Any]]:
    """The rank's batches in order: in process (num_workers=0) or through a DataLoader.

    ``pin_memory`` (where a CUDA device makes page-locked memory available; else ignored): every numeric
    tensor of a batch lives in page-locked memory, so ``.to("cuda", non_blocking=True)`` copies asynchronously.
    """
    pin_memory = pin_memory and can_pin()
    if num_workers == 0:
        dataset = ShardDataset.from_source(source, num_batches, prefetch)
        dataset.pinned = pin_memory
        yield from dataset
        return
    dataset = ShardDataset.from_source(source, num_batches, prefetch, packed=True)
    dataset.slots = slot_table(num_workers, prefetch)
    releases = Releases(dataset.slots)
    # A remote store's client (s3fs: an event loop thread, connection pools, their locks) must not be
    # forked from a process that is using it: a lock held at the fork stays held in the worker. Workers
    # of remote datasets start from a clean forkserver instead; local ones fork, which is faster.
    context = "forkserver" if source.dataset.cache is not None else None
    loader = DataLoader(dataset, batch_size=None, num_workers=num_workers, prefetch_factor=max(prefetch, 1),
                        pin_memory=pin_memory, persistent_workers=False, collate_fn=_as_is,
                        multiprocessing_context=context)
    dataset.token = secrets.token_hex(8)
    batches = iter(loader)
    _widen_pipe(getattr(batches, "_worker_result_queue", None))
    # DataLoader.__next__ wraps each batch in a profiler record_function (~15 us, about a tenth of the
    # training process's time per W1 batch); the batches themselves come from _next_data
    next_batch = getattr(batches, "_next_data", batches.__next__)
    try:
        while True:
            try:
                buffer, layout, slot = next_batch()
            except StopIteration:
                return
            if isinstance(buffer, WorkerFailure):
                raise buffer.error
            releases.track(buffer, slot)
            yield unpack(buffer, pickle.loads(layout), _tensor_view)
    finally:
        forget_segments(dataset.token)  # batches still held keep their own views


def can_pin() -> bool:
    """Whether page-locked host memory can be had (it is CUDA's; without a device, pinning is skipped)."""
    return torch.cuda.is_available()


def _pinned_buffer(nbytes: int) -> tuple[torch.Tensor, np.ndarray]:
    """A page-locked buffer (torch's host allocator caches and reuses them) and a numpy view to fill."""
    tensor = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    return tensor, tensor.numpy()


def _widen_pipe(queue: Any) -> None:
    """Let the workers' result pipe hold whole batches: with Linux's 64 KiB default, a 256 KiB batch
    crosses in four writes and four reads, each waking the other side."""
    try:
        fcntl.fcntl(queue._reader.fileno(), F_SETPIPE_SZ, 1 << 20)  # the default cap for unprivileged users
    except (AttributeError, OSError):  # not Linux, another torch, or a capped /proc/sys/fs/pipe-max-size
        pass


def _pickled_layout(layout: Any) -> bytes:
    """The batch's layout (keys and the values of non-numeric fields) pickled in the worker, as the DataLoader
    would pickle it: a value that cannot be pickled is an error here (in the DataLoader's queue thread it is
    printed and the batch dropped, and the training process waits for it for ever)."""
    try:
        return bytes(ForkingPickler.dumps(layout))
    except Exception as e:
        for name, _, value in layout:
            try:
                ForkingPickler.dumps(value)
            except Exception:
                raise ConfigError(
                    f"field {name!r}: a decoded value cannot be sent from a DataLoader worker to the training "
                    f"process ({type(e).__name__}: {e}); decode to numbers, str, bytes, arrays or tensors, or "
                    "use num_workers=0") from None
        raise


def _sendable(batch: dict[str, Any]) -> dict[str, Any]:
    """``batch``, once its values that are not tensors (keys, strings, decoded objects) pickle."""
    _pickled_layout([(name, None, value) for name, value in batch.items() if not isinstance(value, torch.Tensor)])
    return batch


def _picklable(error: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # an error the DataLoader must wrap after all
        return False
    return True


def _as_is(batch: Any) -> Any:
    """The DataLoader's collate_fn: batches are collated already (its default walks every key of the batch)."""
    return batch


_DTYPES: dict[str, tuple[torch.dtype, int]] = {}  # numpy dtype string -> (torch dtype, item size)


def _tensor_view(buffer: torch.Tensor | np.ndarray, start: int, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A view of the batch buffer with the given numpy dtype and shape (runs per field per batch: kept cheap)."""
    known = _DTYPES.get(dtype)
    if known is None:
        known = _DTYPES[dtype] = (torch.from_numpy(np.empty(0, dtype=dtype)).dtype, np.dtype(dtype).itemsize)
    torch_dtype, itemsize = known
    count = math.prod(shape)
    if isinstance(buffer, np.ndarray):  # one call instead of a slice and a view; its storage keeps the array
        view = (torch.frombuffer(buffer, dtype=torch_dtype, count=count, offset=start) if count
                else torch.empty(0, dtype=torch_dtype))
    else:
        view = buffer[start : start + count * itemsize].view(torch_dtype)
    return view if len(shape) == 1 else view.reshape(shape)
