"""The index file: layout invariants, and refusal of damaged or foreign indexes."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sample_data import simple_samples

from datapipe.errors import FormatVersionError, ShardCorruptError
from datapipe.formats.index import MAGIC, IndexBuilder, ShardIndex
from datapipe.formats.shards import index_path, open_shard, write_shard


@pytest.fixture(scope="module")
def index_bytes(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("idx") / "s.tar"
    write_shard(path, simple_samples(25))
    return index_path(path).read_bytes()


def test_layout_is_little_endian_and_eight_byte_aligned(index_bytes):
    assert index_bytes[:8] == MAGIC
    version, code, shard_size, n = struct.unpack_from("<IIQQ", index_bytes, 8)
    assert (version, code, n) == (1, 1, 25)
    assert len(index_bytes) % 8 == 0
    index = ShardIndex.from_bytes(index_bytes, "s.tar.idx")
    assert index.shard_size == shard_size and len(index) == 25
    assert index.fields == ("bin", "cls")
    assert index.key(24) == "sample000024"


def test_unknown_version_is_a_clear_error(index_bytes):
    data = bytearray(index_bytes)
    data[8:12] = struct.pack("<I", 99)
    with pytest.raises(FormatVersionError, match="version 99"):
        ShardIndex.from_bytes(bytes(data), "s.tar.idx")


def test_not_an_index(index_bytes):
    with pytest.raises(ShardCorruptError, match="magic"):
        ShardIndex.from_bytes(b"x" * len(index_bytes), "s.tar.idx")


@given(position=st.integers(12, 10**6), mask=st.integers(1, 255))
def test_any_flipped_byte_is_caught(index_bytes, position, mask):
    data = bytearray(index_bytes)
    data[position % len(data)] ^= mask
    with pytest.raises((ShardCorruptError, FormatVersionError), match="s.tar.idx"):
        ShardIndex.from_bytes(bytes(data), "s.tar.idx")


@given(cut=st.integers(0, 10**6))
def test_truncated_index_is_caught(index_bytes, cut):
    with pytest.raises(ShardCorruptError, match="s.tar.idx"):
        ShardIndex.from_bytes(index_bytes[: cut % len(index_bytes)], "s.tar.idx")


def test_damaged_index_file_named_when_opening_shard(tmp_path):
    path = tmp_path / "s.tfrecord"
    write_shard(path, simple_samples(5))
    idx = index_path(path)
    idx.write_bytes(idx.read_bytes()[:-3])
    with pytest.raises(ShardCorruptError, match=str(idx)):
        open_shard(path)


def test_extend_records_what_add_records_sample_by_sample():
    rows = [
        ("a", 0, 10, [("x", 1, 4), ("y", 6, 3)]),
        ("bé", 10, 30, []),
        ("c", 30, 31, [("y", 30, 1)]),
    ]
    one_by_one, at_once = IndexBuilder(1), IndexBuilder(1)
    # rows already there: extend appends after them
    one_by_one.add("z", 0, 0, bytes(32), [("w", 0, 0)])
    at_once.add("z", 0, 0, bytes(32), [("w", 0, 0)])
    hashes = [bytes([i]) * 32 for i in range(len(rows))]
    for (key, start, end, members), digest in zip(rows, hashes, strict=True):
        one_by_one.add(key, start, end, digest, members, ["x", "y"])
    keys = [key.encode() for key, *_ in rows]
    at_once.extend(
        starts=np.array([r[1] for r in rows]),
        ends=np.array([r[2] for r in rows]),
        hashes=np.frombuffer(b"".join(hashes), dtype=np.uint8).reshape(-1, 32),
        member_counts=np.array([len(r[3]) for r in rows]),
        member_offsets=np.array([m[1] for r in rows for m in r[3]]),
        member_sizes=np.array([m[2] for r in rows for m in r[3]]),
        member_fields=np.array([("x", "y").index(m[0]) for r in rows for m in r[3]]),
        fields=("x", "y"),
        key_blob=b"".join(keys),
        key_ends=np.cumsum([len(k) for k in keys]),
    )
    assert at_once.build(31).to_bytes() == one_by_one.build(31).to_bytes()


def test_open_shard_checks_what_a_manifest_records(tmp_path):
    """The loader opens its shards with open_shard: index stored elsewhere, size and sha256 from the
    manifest."""
    import hashlib

    from datapipe.errors import NotFoundError

    path = tmp_path / "s.tar"
    write_shard(path, simple_samples(5))
    moved = tmp_path / "elsewhere.idx"
    index_path(path).rename(moved)
    size, digest = path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()
    with open_shard(path, index_file=moved, name="store/s.tar", size=size, sha256=digest) as reader:
        assert reader.name == "store/s.tar" and len(reader.index) == 5
    with pytest.raises(ShardCorruptError, match="the manifest says 1"):
        open_shard(path, index_file=moved, size=1)
    with pytest.raises(ShardCorruptError, match="sha256 does not match the manifest"):
        open_shard(path, index_file=moved, sha256="0" * 64)
    with pytest.raises(NotFoundError, match="no such file"):
        open_shard(path, index_file=tmp_path / "absent.idx")
