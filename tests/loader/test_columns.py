"""Batch gathers over mapped shards: each fast path (one size, big payloads, ASCII digits) equals
the plain one."""

import os
import pickle
import sys

import numpy as np
import pytest

from datapipe.formats.index import ShardIndex
from datapipe.loader.batch_buffers import numpy_view, pack, unpack
from datapipe.loader.collate import Ragged, decode_column
from datapipe.loader.columns import BIG_PAYLOAD, Column
from datapipe.loader.pool import MIN_POOLED, BufferPool


def spread(payloads: list[bytes], gap: int = 37) -> tuple[bytes, np.ndarray, np.ndarray]:
    """A 'shard': the payloads with junk between them, and their offsets and sizes."""
    rng = np.random.default_rng(len(payloads))
    blob, offsets = bytearray(), []
    for p in payloads:
        blob += rng.bytes(gap)
        offsets.append(len(blob))
        blob += p
    blob += rng.bytes(gap)
    return (
        bytes(blob),
        np.array(offsets, dtype=np.int64),
        np.array([len(p) for p in payloads], dtype=np.int64),
    )


def column_over_two_shards(payloads: list[bytes], seed: int = 0) -> Column:
    """A column whose samples come from two shards, interleaved in batch order (as a shuffled batch
    is)."""
    n = len(payloads)
    slots = np.random.default_rng(seed).permutation(n)
    column = Column(n)
    for part in (slots[: n // 2], slots[n // 2 :]):
        buffer, offsets, sizes = spread([payloads[i] for i in part])
        column.add_spans(part, memoryview(buffer), offsets, sizes)
    return column


@pytest.mark.parametrize(
    "sizes",
    [[64] * 40, [BIG_PAYLOAD + 5] * 6, [3, 0, 70, 1, 9, 200, 5, 5], [0, 0, 0]],
    ids=["one size", "big", "mixed", "empty"],
)
def test_ragged_gathers_every_payload_in_batch_order(sizes):
    rng = np.random.default_rng(1)
    payloads = [rng.bytes(s) for s in sizes]
    column = column_over_two_shards(payloads)
    data, offsets = column.ragged()
    assert offsets.tolist() == np.concatenate([[0], np.cumsum(sizes)]).tolist()
    assert [bytes(data[a:b]) for a, b in zip(offsets[:-1], offsets[1:], strict=True)] == payloads
    assert [bytes(v) for v in column.values()] == payloads


@pytest.mark.parametrize("even", [True, False], ids=["evenly spaced", "uneven"])
@pytest.mark.parametrize("runs", [True, False], ids=["runs of slots", "scattered slots"])
def test_strided_and_indexed_gathers_agree(even, runs):
    """Consecutive samples of one layout (evenly spaced offsets, a run of batch slots: unshuffled
    reads) are copied through a strided view; anything else by a fancy index. Both give the same
    batch."""
    rng = np.random.default_rng(3)
    n = 24
    payloads = [rng.bytes(16) for _ in range(n)]
    labels = [str(i % 10).encode() for i in range(n)]
    slots = np.arange(n) if runs else rng.permutation(n)
    columns = {"bin": Column(n), "cls": Column(n)}
    for part in (slots[: n // 2], slots[n // 2 :]):
        for name, values in (("bin", payloads), ("cls", labels)):
            blob, offsets = bytearray(), []
            for i in part.tolist():
                blob += rng.bytes(40 if even else int(rng.integers(1, 60)))
                offsets.append(len(blob))
                blob += values[i]
            columns[name].add_spans(
                part,
                memoryview(bytes(blob)),
                np.array(offsets, dtype=np.int64),
                np.array([len(values[i]) for i in part.tolist()], dtype=np.int64),
            )
    data, bounds = columns["bin"].ragged()
    assert [bytes(data[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)] == payloads
    assert columns["cls"].integers().tolist() == [int(v) for v in labels]


def test_ragged_fills_the_array_it_is_given():
    payloads = [bytes([i]) * 50 for i in range(10)]
    target = np.zeros(1000, dtype=np.uint8)
    data, _ = column_over_two_shards(payloads).ragged(lambda n: target[100 : 100 + n])
    assert np.shares_memory(data, target) and bytes(target[100:600]) == b"".join(payloads)


@pytest.mark.parametrize("labels", [[b"0", b"7", b"12", b"999999999999999999", b"3"], [b"5"] * 9])
def test_ascii_integers_parse_as_a_digit_matrix(labels):
    column = column_over_two_shards(labels)
    assert column.integers().tolist() == [int(v) for v in labels]
    assert decode_column(column, "int").tolist() == [int(v) for v in labels]


@pytest.mark.parametrize(
    "labels", [[b"1", b"-2"], [b"1", b" 2"], [b"1", b""], [b"1" * 19], [b"1", b"2.5"]]
)
def test_other_numbers_fall_back_to_the_general_parser(labels):
    column = column_over_two_shards(labels)
    assert column.integers() is None
    if all(v.strip() for v in labels) and b"." not in b"".join(labels):
        assert decode_column(column, "int").tolist() == [int(v) for v in labels]


def test_objects_fall_back_too():
    column = Column(2)
    column.add_objects(np.array([1, 0]), [b"ab", b"c"])
    assert column.integers() is None
    data, offsets = column.ragged()
    assert bytes(data) == b"cab" and offsets.tolist() == [0, 1, 3]


def index_with_keys(keys: list[str]) -> ShardIndex:
    blob = "".join(keys).encode()
    n = len(keys)
    ends = np.cumsum([len(k.encode()) for k in keys]).astype(np.uint64)
    none, nothing = np.zeros(n, np.uint64), np.zeros(0, np.uint64)
    return ShardIndex(
        format_code=1,
        shard_size=0,
        sample_start=none,
        sample_end=none,
        sample_hash=np.zeros((n, 32), np.uint8),
        sample_members=np.zeros(n + 1, np.uint64),
        member_offset=nothing,
        member_size=nothing,
        member_field=np.zeros(0, np.uint32),
        key_ends=ends,
        key_blob=blob,
        fields=(),
    )


@pytest.mark.parametrize(
    "keys,fixed",
    [
        (["s0001", "s0002", "s0003"], True),
        (["a", "bb", "c"], False),  # lengths differ
        # same total as equal widths would give, ends differ
        (["ab", "cd", "ef", "g", "hij"], False),
        (["é1", "é2"], False),  # not ASCII
        (["a\x00", "bb"], False),  # NUL would be stripped by fixed-width bytes
    ],
)
def test_key_arrays_are_fixed_width_only_when_that_is_exact(keys, fixed):
    array = index_with_keys(keys).key_array()
    assert [k.decode() if fixed else k for k in array.tolist()] == keys and (
        array.dtype.kind == "S"
    ) == fixed


def test_pack_gathers_deferred_ragged_fields_into_its_buffer():
    payloads = [bytes([i]) * (i * 3) for i in range(12)]
    column = column_over_two_shards(payloads, seed=3)
    batch = {"__key__": list("abcdefghijkl"), "cls": np.arange(12), "bin": Ragged(column)}
    buffer, layout = pack(batch)
    back = unpack(buffer, layout, numpy_view)
    data, offsets = back["bin"]
    assert np.shares_memory(data, buffer) and back["cls"].tolist() == list(range(12))
    assert [bytes(data[a:b]) for a, b in zip(offsets[:-1], offsets[1:], strict=True)] == payloads


def test_pool_reuses_a_buffer_only_once_its_batch_is_gone():
    pool = BufferPool(keep=2)
    first = pool.allocate(MIN_POOLED)
    address = first.__array_interface__["data"][0]
    held = pool.allocate(MIN_POOLED)  # ``first`` is still referenced: a new buffer
    assert not np.shares_memory(first, held)
    del first
    again = pool.allocate(MIN_POOLED)
    assert again.__array_interface__["data"][0] == address
    assert not np.shares_memory(again, held)
    small = pool.allocate(100)
    assert len(small) == 100 and sys.getrefcount(small) == 2  # small ones are not pooled


def _received(sent):
    """What the training process gets for a worker's batch: the DataLoader's pickling, shared memory
    and all."""
    from multiprocessing.reduction import ForkingPickler

    return pickle.loads(ForkingPickler.dumps(sent))


def test_a_worker_reuses_a_segment_once_its_slot_is_released():
    from datapipe.loader.torch import segments
    from datapipe.loader.torch.segments import SegmentBatch, WorkerSegments, slot_table

    table = slot_table(2, prefetch=2)
    slots = table.shape[1]
    assert slots == 6  # 2 asked ahead by the DataLoader, 1 being packed, 1 in use, slack
    worker = WorkerSegments(table, 1, "run")
    (sent, slot), view = worker.allocate(1000)
    assert (
        slot == (1, 0)
        and table[1, 0] == 1
        and isinstance(sent, SegmentBatch)
        and sent.segment is not None
    )
    view[:] = 7
    first = _received(sent)  # the segment crosses once...
    assert first.tolist() == [7] * 1000
    (other, other_slot), _ = worker.allocate(1000)  # slot 0 is busy
    assert other_slot == (1, 1) and other.segment_id != sent.segment_id
    table[1, 0] = 0  # what the training process does once the batch is gone
    (again, again_slot), again_view = worker.allocate(900)
    # ...then its id
    assert again_slot == (1, 0) and again.segment is None and again.segment_id == sent.segment_id
    again_view[:] = 9
    second = _received(again)
    assert second.tolist() == [9] * 900 and np.shares_memory(first, second)
    assert second is not first  # an array per batch: Releases watches it
    table[1, 0] = 0
    # a free segment too small for the batch is replaced
    (bigger, bigger_slot), _ = worker.allocate(5000)
    assert (
        bigger_slot == (1, 0)
        and bigger.segment.numel() == 5000
        and bigger.segment_id != sent.segment_id
    )
    assert not np.shares_memory(_received(bigger), first)
    assert sent.segment_id not in segments._RECEIVED  # the replaced segment is let go
    for _ in range(slots):  # every slot busy: fresh segments, not pooled, sent whole each time
        (extra, extra_slot), _ = worker.allocate(100)
    assert extra_slot is None and table[0].sum() == 0
    segments.forget_segments("run")
    assert not any(k[0] == "run" for k in segments._RECEIVED)


@pytest.mark.parametrize("received_as", ["array", "tensor"])
def test_the_training_process_releases_a_slot_when_the_batch_buffer_dies(received_as):
    """A pooled batch arrives as a numpy array (SegmentBatch), an unpooled or pinned one as a
    tensor."""
    import torch

    from datapipe.loader.torch.segments import Releases, slot_table
    from datapipe.loader.torch.tensors import tensor_view

    table = slot_table(1, prefetch=1)
    table[0, 3] = 1
    releases = Releases(table)
    received = (
        np.zeros(64, dtype=np.uint8)
        if received_as == "array"
        else torch.zeros(64, dtype=torch.uint8)
    )
    releases.track(received, (0, 3))
    view = tensor_view(received, 8, "<i8", (1,))  # a tensor of the batch keeps its buffer alive
    del received
    releases.track(torch.zeros(1), None)
    assert table[0, 3] == 1
    del view
    releases.track(torch.zeros(1), None)
    assert table[0, 3] == 0


def mapped(address: int) -> bool:
    with open("/proc/self/maps") as maps:
        return any(
            int(lo, 16) <= address < int(hi, 16)
            for lo, hi in (line.split()[0].split("-") for line in maps)
        )


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads Linux's /proc/self/maps")
def test_a_fresh_pooled_buffer_is_writable_and_unmapped_once_forgotten_and_dropped():
    pool = BufferPool(keep=1)
    batch = pool.allocate(3 * MIN_POOLED)
    batch[:] = 7
    assert len(batch) == 3 * MIN_POOLED and int(batch[::4096].sum()) == 7 * len(batch[::4096])
    address = batch.__array_interface__["data"][0]
    # too big to reuse ``batch``'s buffer, and keep=1: the pool forgets it
    pool.allocate(4 * MIN_POOLED)
    assert mapped(address)  # the batch still holds it
    del batch
    assert not mapped(address)
