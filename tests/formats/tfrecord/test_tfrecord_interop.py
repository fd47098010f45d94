"""Our TFRecords read by the `tfrecord` package (CRCs checked with its code), and theirs read by
us."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from sample_data import plain, simple_samples

from datapipe.errors import SampleError, ShardCorruptError
from datapipe.formats.base import KEY
from datapipe.formats.shards import build_index, open_shard, write_shard

tfrecord = pytest.importorskip("tfrecord")
from tfrecord.reader import tfrecord_loader  # noqa: E402
from tfrecord.writer import TFRecordWriter  # noqa: E402


def their_crc_check(path: Path) -> int:
    """Walk the file with the tfrecord package's masked_crc, checking both CRCs of every record."""
    data = path.read_bytes()
    pos = records = 0
    while pos < len(data):
        length_bytes = data[pos : pos + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        assert data[pos + 8 : pos + 12] == TFRecordWriter.masked_crc(length_bytes)
        payload = data[pos + 12 : pos + 12 + length]
        assert data[pos + 12 + length : pos + 16 + length] == TFRecordWriter.masked_crc(payload)
        pos += 16 + length
        records += 1
    assert pos == len(data)
    return records


def test_tfrecord_package_reads_ours(tmp_path):
    path = tmp_path / "ours.tfrecord"
    samples = simple_samples(100, size=500)
    write_shard(path, samples)
    assert their_crc_check(path) == 100
    got = list(tfrecord_loader(str(path), None, {KEY: "byte", "cls": "byte", "bin": "byte"}))
    assert [{k: bytes(v) for k, v in g.items()} for g in got] == [
        {KEY: s[KEY].encode(), "cls": s["cls"], "bin": s["bin"]} for s in samples
    ]


def test_numeric_features_round_trip_and_are_typed_for_tfrecord(tmp_path):
    path = tmp_path / "num.tfrecord"
    samples = [
        {
            KEY: "a",
            "label": 3,
            "vec": np.arange(5, dtype=np.float32),
            "ids": [1, 2, 2**62],
            "tags": [b"x", b"yz"],
        },
        {
            KEY: "b",
            "label": -1,
            "vec": [0.5, 1.5],
            "ids": np.array([7], dtype=np.uint8),
            "tags": [],
        },
    ]
    write_shard(path, samples)
    with open_shard(path) as reader:
        a, b = reader[0], reader[1]
    assert a["label"].dtype == np.int64 and a["label"].tolist() == [3]
    assert a["vec"].dtype == np.float32 and a["vec"].tolist() == [0, 1, 2, 3, 4]
    assert a["ids"].tolist() == [1, 2, 2**62] and a["tags"] == [b"x", b"yz"]
    assert b["vec"].tolist() == [0.5, 1.5] and b["ids"].tolist() == [7] and b["tags"] == []
    got = list(tfrecord_loader(str(path), None, {"label": "int", "vec": "float", "ids": "int"}))
    assert got[0]["label"].tolist() == [3] and got[0]["ids"].tolist() == [1, 2, 2**62]
    assert got[1]["vec"].tolist() == [0.5, 1.5]


def test_int_beyond_int64_is_a_sample_error(tmp_path):
    with pytest.raises(SampleError, match="'k'.*'big'"):
        write_shard(tmp_path / "x.tfrecord", [{KEY: "k", "big": 2**64}])


def test_we_read_tfrecord_package_output(tmp_path):
    path = tmp_path / "theirs.tfrecord"
    writer = TFRecordWriter(str(path))
    for i in range(30):
        writer.write(
            {"image": (bytes([i]) * 10, "byte"), "label": (i, "int"), "score": (i / 2, "float")}
        )
    writer.close()
    with open_shard(path) as reader:  # no index yet: scan
        got = [plain(s) for s in reader]
    assert [g[KEY] for g in got] == [f"{i:08d}" for i in range(30)]  # no __key__: record numbers
    assert got[7] == {KEY: "00000007", "image": bytes([7]) * 10, "label": [7], "score": [3.5]}
    build_index(path)
    with open_shard(path) as reader:
        assert plain(reader[29])["label"] == [29]


def test_bad_record_names_shard_record_and_offset(tmp_path):
    path = tmp_path / "bad.tfrecord"
    written = write_shard(path, simple_samples(5))
    data = bytearray(path.read_bytes())
    third = int(written.index.sample_start[2])
    data[int(written.index.sample_end[2]) - 5] ^= 0x01  # the last payload byte: the value of 'cls'
    path.write_bytes(data)
    with pytest.raises(ShardCorruptError) as err, open_shard(path, index=False) as reader:
        list(reader)
    assert f"{path} at byte {third}: record 2: data checksum mismatch" in str(err.value)
    with open_shard(path, index=False, verify_crc=False) as reader:  # CRCs off: payload read as is
        assert [s["cls"] for s in reader] == [b"0", b"1", b"3", b"3", b"4"]


def test_length_larger_than_file_is_corrupt(tmp_path):
    path = tmp_path / "len.tfrecord"
    length = struct.pack("<Q", 2**62)
    from datapipe.formats.tfrecord.framing import masked_crc

    path.write_bytes(length + struct.pack("<I", masked_crc(length)) + b"tiny")
    with pytest.raises(ShardCorruptError, match="claims"), open_shard(path) as reader:
        list(reader)
