"""DataLoader wiring: ShardDataset (an IterableDataset of ready batches) and the Loader's iteration
through it.

Batches are collated inside the DataLoader workers and cross to the main process as one packed
buffer each (loader/batch_buffers.py), not as per-sample objects: pickled through the worker's pipe
when small, else in a shared-memory segment (segments.py).
"""

from __future__ import annotations

import fcntl
import os
import pickle
import secrets
import traceback
from collections.abc import Iterator, Mapping, Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from datapipe.errors import ConfigError, DatapipeError
from datapipe.loader import copies
from datapipe.loader.batch_buffers import pack, unpack
from datapipe.loader.batches import BatchSource
from datapipe.loader.collate import PAYLOAD_DECODERS, Decoder
from datapipe.loader.dataset import Dataset
from datapipe.loader.mix import Mix
from datapipe.loader.opening import open_checked
from datapipe.loader.prefetch import prefetch as prefetched
from datapipe.loader.schedule import DEFAULT_BLOCK_SHARDS, DropLast, worker_steps
from datapipe.loader.settings import LoaderSettings
from datapipe.loader.torch.process_group import distributed_world
from datapipe.loader.torch.segments import Releases, WorkerSegments, forget_segments, slot_table
from datapipe.loader.torch.tensors import can_pin, pinned_buffer, tensor_view, to_tensors
from datapipe.loader.world import resolve_world

# bytes of a packed batch below which workers pickle it rather than share memory
PIPE_LIMIT = 64 << 10
# fields a worker packs as raw bytes and offsets, not pickled objects: the training process makes
# the lists again from the batch's buffer (batch_buffers.unpack) for less than unpickling them
SENT_AS_BYTES = ("ragged", *PAYLOAD_DECODERS)
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux


class WorkerFailure:
    """A datapipe error of a worker, sent as an item so that the training process raises it as
    itself.

    (The DataLoader would re-raise it as RuntimeError("Caught ShardCorruptError ...") with the
    worker's traceback as text; the Loader raises the original class, with its attributes, and that
    traceback as a note.)"""

    def __init__(self, error: DatapipeError, worker: int) -> None:
        error.add_note(f"raised in DataLoader worker {worker}:\n{traceback.format_exc().rstrip()}")
        self.error = error


class Packed(NamedTuple):
    """What a worker yields for the Loader: one batch packed in one buffer (or a failure)."""

    # worker side: uint8 numpy array (pickled), SegmentBatch or a tensor (shared memory), or
    # WorkerFailure
    buffer: Any
    layout: Any
    slot: Any

    def pin_memory(self, device: Any = None) -> Packed:
        """The DataLoader's pinning thread calls this (it would pass numpy buffers by unpinned): a
        copy of the buffer in page-locked memory, made off the training loop's thread."""
        if isinstance(self.buffer, WorkerFailure):
            return self
        buffer = (
            torch.from_numpy(self.buffer) if isinstance(self.buffer, np.ndarray) else self.buffer
        )
        return self._replace(buffer=buffer.pin_memory())


class ShardDataset(IterableDataset):
    """The batches of one rank and epoch, split across DataLoader workers round-robin by batch.

    Use with ``DataLoader(ds, batch_size=None, num_workers=N)``; each item is a whole batch.
    Build one with the same arguments as ``datapipe.Loader``. (A Loader makes its batches the
    same way when it has no workers; its own DataLoader workers send theirs packed.)
    """

    def __init__(
        self,
        dataset: str | Dataset | Mix,
        batch_size: int = 256,
        *,
        shuffle: bool = True,
        seed: int = 0,
        epoch: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: DropLast = True,
        fields: Sequence[str] | None = None,
        decode: Mapping[str, Decoder] | None = None,
        prefetch: int | None = None,
        block_shards: int = DEFAULT_BLOCK_SHARDS,
        position: int = 0,
        split: str | None = None,
        pack: Any = None,
    ) -> None:
        settings = LoaderSettings(
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            block_shards=block_shards,
            fields=fields,
            decode=decode,
            prefetch=prefetch,
        )
        data, _ = open_checked(dataset, split=split, packing=(pack, seed, shuffle, block_shards))
        world = resolve_world(rank, world_size, os.environ, distributed_world)
        self.source = BatchSource(data, settings, world, epoch, position)
        self.num_batches = self.source.plan.num_batches()
        # a thread ahead in each process only if asked: DataLoader prefetches
        self.prefetch = settings.prefetch

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return _made_here(self.source, self.prefetch)


class _PackedBatches(IterableDataset):
    """The Loader's transport out of its DataLoader workers: each worker makes its share of the
    rank's batches (``source``) and yields each packed in one buffer (loader/batch_buffers.py), big
    ones in a pooled shared-memory segment whose slot ``slots`` tracks, named by the run's
    ``token``."""

    def __init__(self, source: BatchSource, slots: torch.Tensor, token: str) -> None:
        self.source, self.slots, self.token = source, slots, token

    def __iter__(self) -> Iterator[Packed]:
        steps, info = _share(self.source)
        worker = info.id if info is not None else 0
        segments = WorkerSegments(self.slots, worker, self.token)

        def allocate(nbytes: int) -> tuple[Any, np.ndarray]:
            # big batches are packed straight into a pooled shared-memory segment and cross as its
            # name; small ones as a pickled copy, which costs about as little
            if nbytes < PIPE_LIMIT:
                buffer = np.empty(nbytes, dtype=np.uint8)
                return (buffer, None), buffer
            return segments.allocate(nbytes)

        def packed(batch: dict[str, Any]) -> tuple[Any, bytes]:
            handle, layout = pack(batch, allocate)
            return handle, _pickled_layout(layout)

        # no thread ahead: the DataLoader already asks each worker for `prefetch` batches, and a
        # second thread in the worker would only contend for its GIL
        try:
            for (buffer, slot), layout in self.source.produce(steps, packed, SENT_AS_BYTES):
                yield Packed(buffer, layout, slot)
        except DatapipeError as e:
            if info is None or not _picklable(e):
                raise
            yield Packed(WorkerFailure(e, worker), None, None)


def _share(source: BatchSource) -> tuple[Sequence[int], Any]:
    """The steps of ``source`` this process makes (a DataLoader worker every n-th, from its id;
    else all), and the DataLoader's worker info (None outside a worker)."""
    info = get_worker_info()
    if info is None:
        return worker_steps(source.delivered(), 0, 1), None
    copies.set_threads(1)  # the DataLoader's workers use the cores already
    return worker_steps(source.delivered(), info.id, info.num_workers), info


def _made_here(
    source: BatchSource,
    prefetch: int,
    pinned: bool = False,
) -> Iterator[dict[str, Any]]:
    """This process's share of ``source``'s batches (``_share``) as tensors, made in this process
    ``prefetch`` ahead by a thread (0: each when asked); ``pinned``: gathered straight into
    page-locked memory, one copy."""
    steps, info = _share(source)
    if pinned:
        packed = source.produce(steps, lambda b: pack(b, pinned_buffer), ("ragged",))
        for buffer, layout in prefetched(packed, prefetch):
            yield unpack(buffer, layout, tensor_view)
        return
    batches = prefetched(source.produce(steps, to_tensors), prefetch)
    # in a user's own DataLoader: a batch its queue thread cannot pickle would be dropped, and
    # waited for
    yield from batches if info is None else map(_sendable, batches)


def iterate(
    source: BatchSource,
    num_workers: int,
    prefetch: int,
    pin_memory: bool = False,
) -> Iterator[dict[str, Any]]:
    """The rank's batches in order: in process (num_workers=0) or through a DataLoader.

    ``pin_memory`` (where a CUDA device makes page-locked memory available; else ignored): every
    numeric tensor of a batch lives in page-locked memory, so ``.to("cuda", non_blocking=True)``
    copies asynchronously.
    """
    pin_memory = pin_memory and can_pin()
    if num_workers == 0:
        yield from _made_here(source, prefetch, pin_memory)
        return
    slots = slot_table(num_workers, prefetch)
    transport = _PackedBatches(source, slots, secrets.token_hex(8))
    releases = Releases(slots)
    # A remote store's client (s3fs: an event loop thread, connection pools, their locks) must not
    # be forked from a process that is using it: a lock held at the fork stays held in the worker.
    # Workers of remote datasets start from a clean forkserver instead; local ones fork, which is
    # faster.
    context = _forkserver() if source.dataset.files.remote else None
    loader = DataLoader(
        transport,
        batch_size=None,
        num_workers=num_workers,
        prefetch_factor=max(prefetch, 1),
        pin_memory=pin_memory,
        persistent_workers=False,
        collate_fn=_as_is,
        multiprocessing_context=context,
    )
    batches = iter(loader)
    _widen_pipe(getattr(batches, "_worker_result_queue", None))
    # _next_data, not __next__: the same batches without __next__'s per-batch profiler
    # record_function
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
            yield unpack(buffer, pickle.loads(layout), tensor_view)
    except BaseException:
        # The error's traceback keeps this frame, and the DataLoader's iterator with it, until the
        # garbage collector frees them; shut the workers down now, while the index queues still
        # deliver their stop signal (from the collector, a worker can miss it and is killed after
        # torch's join timeout).
        shutdown = getattr(batches, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        raise
    finally:
        forget_segments(transport.token)  # batches still held keep their own views


def _widen_pipe(queue: Any) -> None:
    """Let the workers' result pipe hold whole batches: with Linux's 64 KiB default, a 256 KiB batch
    crosses in four writes and four reads, each waking the other side."""
    try:
        # the default cap for unprivileged users
        fcntl.fcntl(queue._reader.fileno(), F_SETPIPE_SZ, 1 << 20)
    # not Linux, another torch, or a capped /proc/sys/fs/pipe-max-size
    except (AttributeError, OSError):
        pass


def _pickled_layout(layout: Any) -> bytes:
    """The batch's layout (keys and the values of non-numeric fields) pickled in the worker, as the
    DataLoader would pickle it: a value that cannot be pickled is an error here (in the DataLoader's
    queue thread it is printed and the batch dropped, and the training process waits for it for
    ever)."""
    try:
        return bytes(ForkingPickler.dumps(layout))
    except Exception as e:
        for name, _, value in layout:
            try:
                ForkingPickler.dumps(value)
            except Exception:
                raise ConfigError(
                    f"field {name!r}: a decoded value cannot be sent from a DataLoader "
                    "worker to the training "
                    f"process ({type(e).__name__}: {e}); decode to numbers, str, bytes, "
                    "arrays or tensors, or "
                    "use num_workers=0"
                ) from None
        raise


def _sendable(batch: dict[str, Any]) -> dict[str, Any]:
    """``batch``, once its values that are not tensors (keys, strings, decoded objects) pickle."""
    _pickled_layout(
        [
            (name, None, value)
            for name, value in batch.items()
            if not isinstance(value, torch.Tensor)
        ]
    )
    return batch


def _picklable(error: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # an error the DataLoader must wrap after all
        return False
    return True


def _forkserver() -> Any:
    """The forkserver context, its server importing torch and this module before it forks any worker
    (so a worker starts in milliseconds, not after its own imports); modules a user asked it to
    preload stay."""
    import multiprocessing
    from multiprocessing import forkserver

    import datapipe.forkserver

    if datapipe.forkserver.idle():  # not started yet: its preload list may grow
        wanted = datapipe.forkserver.preload_list()
        for module in ("torch", __name__):
            if module not in wanted:
                wanted.append(module)
        forkserver.set_forkserver_preload(wanted)
    return multiprocessing.get_context("forkserver")


def _as_is(batch: Any) -> Any:
    """The DataLoader's collate_fn: batches are collated already (its default walks every key of the
    batch)."""
    return batch
