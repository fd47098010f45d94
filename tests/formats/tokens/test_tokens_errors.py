"""Token shards refuse what they cannot store, and damaged files name themselves."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datapipe.errors import FormatVersionError, NotFoundError, SampleError, ShardCorruptError
from datapipe.formats.base import KEY
from datapipe.formats.shards import index_path, open_shard, write_shard
from datapipe.formats.tokens.docs import DocumentTable
from datapipe.formats.tokens.megatron import MAX_LENGTH, MegatronIndex
from datapipe.formats.tokens.writer import TokensShardWriter

DOCS = [
    {KEY: f"d{i}", "tokens": np.arange(i + 1, dtype=np.uint16), "url": f"u{i}".encode()}
    for i in range(6)
]


@pytest.fixture
def shard(tmp_path) -> Path:
    path = tmp_path / "shard-000000.bin"
    write_shard(path, DOCS, "tokens")
    return path


def sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name[: -len(".bin")] + suffix)


@pytest.mark.parametrize("size", [0, 10, 33, 34, 60])
def test_short_megatron_index_names_the_file(shard, size):
    idx = sibling(shard, ".idx")
    idx.write_bytes(idx.read_bytes()[:size])
    with pytest.raises(ShardCorruptError, match=f"{idx}.*(shorter|implies|cut)"):
        open_shard(shard)


@pytest.mark.parametrize(
    ("offset", "value", "error", "message"),
    [
        (0, b"XXIDIDX\x00\x00", ShardCorruptError, "MMIDIDX"),
        (9, struct.pack("<Q", 2), FormatVersionError, "version 2"),
        (17, bytes([6]), ShardCorruptError, "dtype code 6"),
        (18, struct.pack("<Q", 7), ShardCorruptError, "implies"),
    ],
)
def test_corrupt_megatron_index_names_the_file(shard, offset, value, error, message):
    idx = sibling(shard, ".idx")
    data = bytearray(idx.read_bytes())
    data[offset : offset + len(value)] = value
    idx.write_bytes(data)
    with pytest.raises(error, match=f"{idx}.*{message}"):
        open_shard(shard)


def test_megatron_index_of_other_documents_is_refused(shard, tmp_path):
    other = tmp_path / "other.bin"
    write_shard(other, [{**d, "tokens": d["tokens"][::-1].copy()} for d in DOCS[::-1]], "tokens")
    sibling(shard, ".idx").write_bytes(sibling(other, ".idx").read_bytes())
    with pytest.raises(ShardCorruptError, match=f"{shard}.*different documents"):
        open_shard(shard)


def test_document_indices_that_do_not_end_at_the_count(tmp_path):
    data = bytearray(MegatronIndex.for_lengths(np.array([1, 2]), np.dtype("<u2")).to_bytes())
    data[-8:] = struct.pack("<q", 5)
    with pytest.raises(ShardCorruptError, match="x.idx.*document indices"):
        MegatronIndex.from_bytes(bytes(data), "x.idx")


@pytest.mark.parametrize("cut", [0, 50, -1])
def test_damaged_documents_table_names_the_file(shard, cut):
    docs = sibling(shard, ".docs")
    data = bytearray(docs.read_bytes())
    if cut == -1:
        data[80] ^= 0xFF
    else:
        data = data[:cut]
    docs.write_bytes(data)
    with pytest.raises(ShardCorruptError, match=f"{docs}.*(shorter|checksum|implies)"):
        open_shard(shard)


def test_short_bin_names_the_file_and_what_to_do(shard):
    shard.write_bytes(shard.read_bytes()[:-2])
    with pytest.raises(ShardCorruptError, match=f"{shard}.*cut short.*write the shard again"):
        open_shard(shard, index=False)


@pytest.mark.parametrize("suffix", [".idx", ".docs"])
def test_missing_companion_names_the_file(shard, suffix):
    sibling(shard, suffix).unlink()
    with pytest.raises(NotFoundError, match=f"{sibling(shard, suffix)}: no such file.*copy"):
        open_shard(shard)


def test_index_of_another_shard_is_refused(shard, tmp_path):
    other = tmp_path / "other.bin"
    write_shard(other, [{**d, "tokens": d["tokens"] + 1} for d in DOCS], "tokens")
    index_path(shard).write_bytes(index_path(other).read_bytes())
    with pytest.raises(ShardCorruptError, match="does not match the hash"):
        open_shard(shard)


def write(samples, dtype=None) -> None:
    with open("/dev/null", "wb") as out:
        writer = TokensShardWriter(out, "s.bin", dtype=dtype)
        for sample in samples:
            writer.write(sample)
        writer.finish()


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        ({KEY: "a", "url": b"x"}, "'a' has no 'tokens'"),
        ({KEY: "a", "tokens": [1, 2]}, "'a'.*1-D numpy array"),
        ({KEY: "a", "tokens": np.ones((2, 2), np.uint16)}, "'a'.*1-D numpy array"),
        ({KEY: "a", "tokens": np.ones(2, np.float32)}, "'a'.*1-D numpy array"),
        ({KEY: "a", "tokens": np.ones(2, np.uint16), "url": "text"}, "'a'.*'url'.*bytes"),
        ({KEY: "a", "tokens": np.ones(2, np.uint16), "__row__": -1}, "'a'.*__row__"),
        ({KEY: "a", "tokens": np.ones(2, np.uint16), "__source__": 3}, "'a'.*__source__"),
    ],
)
def test_unstorable_documents_are_refused_by_key(sample, message):
    with pytest.raises(SampleError, match=message):
        write([sample])


def test_a_document_longer_than_int32_lengths_is_refused():
    huge = np.broadcast_to(np.uint16(1), (MAX_LENGTH + 1,))  # no memory behind it
    with pytest.raises(SampleError, match=f"'big' has {MAX_LENGTH + 1} tokens.*int32.*split"):
        write([{KEY: "big", "tokens": huge}])
    with pytest.raises(SampleError, match="int32"):
        MegatronIndex.for_lengths(np.array([MAX_LENGTH + 1]), np.dtype("<u2"))


@pytest.mark.parametrize(
    ("ids", "dtype", "bad"),
    [([1, 70_000], np.uint16, 70_000), ([-1], np.uint16, -1), ([2**31], np.int32, 2**31)],
)
def test_ids_that_do_not_fit_the_shard_are_refused(ids, dtype, bad):
    with pytest.raises(SampleError, match=f"'a': token id {bad} does not fit"):
        write([{KEY: "a", "tokens": np.array(ids, np.int64)}], dtype=dtype)


def test_first_document_sets_the_dtype_of_the_rest():
    small = {KEY: "a", "tokens": np.ones(2, np.uint16)}
    with pytest.raises(SampleError, match="'b': token id 65536"):
        write([small, {KEY: "b", "tokens": np.array([65_536], np.int32)}])


@pytest.mark.parametrize("docs", [[], [{KEY: "a", "tokens": np.zeros(0, np.uint16)}]])
def test_a_shard_without_tokens_is_refused(docs):
    with pytest.raises(SampleError, match="at least one token.*empty .bin"):
        write(docs)


def test_blocks_of_other_formats_or_dtypes_are_refused():
    from datapipe.formats.tar.writer import TarShardWriter

    with pytest.raises(SampleError, match="without its documents table"):
        write_blocks([TarShardWriter.encode_samples(["a"], {"x": [b"1"]})])
    blocks = [
        TokensShardWriter.encode_samples([k], {"tokens": [np.ones(1, t)]})
        for k, t in (("a", np.uint16), ("b", np.int32))
    ]
    with pytest.raises(SampleError, match="block of int32 ids in a shard of uint16"):
        write_blocks(blocks)


def write_blocks(blocks) -> None:
    with open("/dev/null", "wb") as out:
        writer = TokensShardWriter(out, "s.bin")
        writer.write_many(blocks)


@st.composite
def mutations(draw, size: int):
    return draw(
        st.lists(st.tuples(st.integers(0, size - 1), st.binary(min_size=1, max_size=8)), max_size=4)
    ), draw(st.integers(0, size))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mangled_companions_parse_or_fail_cleanly(shard, data):
    for suffix, parse in ((".idx", MegatronIndex.from_bytes), (".docs", DocumentTable.from_bytes)):
        raw = bytearray(sibling(shard, suffix).read_bytes())
        edits, cut = data.draw(mutations(len(raw)))
        for at, chunk in edits:
            raw[at : at + len(chunk)] = chunk
        try:
            parse(bytes(raw[:cut]), f"mangled{suffix}")
        except (ShardCorruptError, FormatVersionError) as e:
            assert f"mangled{suffix}" in str(e)
