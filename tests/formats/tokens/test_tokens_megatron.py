"""Token shards read back by Megatron-Core's own IndexedDataset and by datapipe's reader."""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sample_data import plain

from datapipe.errors import ConfigError
from datapipe.formats.base import KEY
from datapipe.formats.registry import get_format
from datapipe.formats.shards import build_index, index_path, open_shard, write_shard
from datapipe.formats.tokens.megatron import MegatronIndex, token_dtype
from datapipe.formats.tokens.writer import ROW, SOURCE, TokensShardWriter

with warnings.catch_warnings():  # it warns that Transformer Engine and Apex are not installed
    warnings.simplefilter("ignore")
    from megatron.core.datasets.indexed_dataset import IndexedDataset


def prefix(path: Path) -> str:
    return str(path)[: -len(".bin")]


@st.composite
def documents(draw):
    """Documents of random lengths (zero included, one token at least in all) and ids of a
    random vocabulary, with random other fields and origins."""
    vocab = draw(st.sampled_from([2, 255, 65_536, 65_537, 100_000, 2**31]))
    dtype = token_dtype(vocab)
    lengths = draw(st.lists(st.integers(0, 300), min_size=1, max_size=40))
    if not sum(lengths):
        lengths[0] = 1
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    docs = []
    for i, n in enumerate(lengths):
        doc = {KEY: f"doc.{i:04d}", "tokens": rng.integers(0, vocab, n).astype(dtype)}
        if draw(st.booleans()):
            doc["url"] = f"https://example.org/{i}".encode()
        if draw(st.booleans()):
            doc[SOURCE], doc[ROW] = f"raw/web-{i % 3}.jsonl", i * 7
        docs.append(doc)
    return vocab, docs


def expected(doc: dict) -> dict:
    return plain({k: v for k, v in doc.items() if k not in (SOURCE, ROW)})


@settings(max_examples=60, deadline=None)
@given(drawn=documents())
def test_every_document_reads_back_in_megatron_and_datapipe(tmp_path_factory, drawn):
    vocab, docs = drawn
    path = tmp_path_factory.mktemp("tok") / "shard-000000.bin"
    written = write_shard(path, docs, "tokens")
    assert written.size == path.stat().st_size
    assert written.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    dtype = token_dtype(vocab)
    # Megatron-Core, as a training job opens the shard
    dataset = IndexedDataset(prefix(path))
    assert len(dataset) == len(docs)
    assert dataset.index.dtype == dtype.type
    assert dataset.document_indices.tolist() == list(range(len(docs) + 1))
    for i, doc in enumerate(docs):
        got = dataset[i]
        assert got.dtype == dtype and got.tolist() == doc["tokens"].tolist()
    del dataset, got
    # datapipe's reader, through its index and without it
    with open_shard(path) as reader:
        assert len(reader) == len(docs)
        assert reader.keys() == [d[KEY] for d in docs]
        assert reader.lengths.tolist() == [len(d["tokens"]) for d in docs]
        for i in reversed(range(len(docs))):
            assert plain(reader[i]) == expected(docs[i])
            assert reader.origin(i) == (docs[i].get(SOURCE), docs[i].get(ROW))
        assert reader.build_index().to_bytes() == written.index.to_bytes()
    with open_shard(path, index=False) as reader:
        assert [plain(s) for s in reader] == [expected(d) for d in docs]


def test_tokens_are_views_of_the_mapped_bin(tmp_path):
    path = tmp_path / "s.bin"
    write_shard(path, [{KEY: "a", "tokens": np.arange(10, dtype=np.uint16)}], "tokens")
    with open_shard(path) as reader:
        ids = reader.tokens(0)
        assert not ids.flags.owndata and not ids.flags.writeable
        assert ids.tolist() == list(range(10))
        del ids
    with open_shard(path, copy=True) as reader:
        assert reader.tokens(-1).flags.owndata


def test_keys_without_datapipe_index(tmp_path):
    path = tmp_path / "s.bin"
    docs = [{KEY: f"k{i}", "tokens": np.ones(2, np.uint16)} for i in range(4)]
    write_shard(path, docs, "tokens", index=False)
    with open_shard(path) as reader:
        assert reader.index is None and reader.gather_keys([3, 0]) == ["k3", "k0"]


def test_companions_kept_elsewhere(tmp_path):
    """A cache keyed by content holds each file under its hash: open_shard is told where."""
    path = tmp_path / "s.bin"
    write_shard(path, [{KEY: "a", "tokens": np.arange(4, dtype=np.uint16)}], "tokens")
    elsewhere = {}
    for suffix in (".idx", ".docs"):
        elsewhere[suffix] = tmp_path / f"cached{suffix}.blob"
        (tmp_path / f"s{suffix}").rename(elsewhere[suffix])
    with open_shard(path, companion_files=elsewhere) as reader:
        assert reader.tokens(0).tolist() == [0, 1, 2, 3]


def test_bin_is_a_plain_token_array_for_memmap_readers(tmp_path):
    """OLMo-style readers take ``.bin`` as one array of ids, EOS between documents."""
    eos = 0
    docs = [np.array([5, 6, 7, eos], np.uint16), np.array([8, 9, eos], np.uint16)]
    path = tmp_path / "s.bin"
    write_shard(path, [{KEY: f"d{i}", "tokens": d} for i, d in enumerate(docs)], "tokens")
    flat = np.memmap(path, dtype=np.uint16, mode="r")
    assert flat.tolist() == np.concatenate(docs).tolist()


def test_the_index_describes_the_ids_megatron_computes(tmp_path):
    """The .idx bytes are the ones Megatron-Core's own builder writes for the same documents."""
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    docs = [np.array(d, np.int32) for d in ([1, 2, 3], [], [70_000] * 5)]
    ours = tmp_path / "ours.bin"
    write_shard(ours, [{KEY: f"d{i}", "tokens": d} for i, d in enumerate(docs)], "tokens")
    builder = IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=np.int32)
    for doc in docs:
        builder.add_document(doc, [len(doc)])
    builder.finalize(str(tmp_path / "theirs.idx"))
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (
            tmp_path / f"theirs{suffix}"
        ).read_bytes()


def test_one_format_under_two_names_and_its_files(tmp_path):
    assert get_format("megatron") is get_format("tokens")
    path = tmp_path / "shard-000003.bin"
    write_shard(path, [{KEY: "a", "tokens": np.ones(3, np.uint16)}], "megatron")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"shard-000003{s}" for s in (".bin", ".bin.idx", ".docs", ".idx")]
    assert index_path(path).read_bytes()[:8] == b"DPIDX\x00\x00\x00"
    _, built = build_index(path)
    assert built.keys() == ["a"]


def test_same_documents_same_bytes(tmp_path):
    docs = [{KEY: f"d{i}", "tokens": np.arange(i, dtype=np.uint16), "url": b"u"} for i in range(9)]
    for name in ("a", "b"):
        write_shard(tmp_path / f"{name}.bin", docs, "tokens")
    for suffix in (".bin", ".bin.idx", ".idx", ".docs"):
        assert (tmp_path / f"a{suffix}").read_bytes() == (tmp_path / f"b{suffix}").read_bytes()


@pytest.mark.parametrize(
    ("vocab", "dtype"),
    [(1, "uint16"), (65_536, "uint16"), (65_537, "int32"), (200_000, "int32"), (2**31, "int32")],
)
def test_token_dtype_follows_the_vocabulary(vocab, dtype):
    assert token_dtype(vocab) == np.dtype(dtype)


@pytest.mark.parametrize("vocab", [0, 2**31 + 1])
def test_token_dtype_refuses_vocabularies_it_cannot_store(vocab):
    with pytest.raises(ConfigError, match=str(vocab)):
        token_dtype(vocab)


def test_writer_dtype_converts_ids_that_fit(tmp_path):
    path = tmp_path / "s.bin"
    with open(path, "wb") as out:
        writer = TokensShardWriter(out, str(path), dtype=np.uint16)
        writer.write({KEY: "a", "tokens": np.array([1, 65_535], np.int64)})
        written = writer.finish()
    megatron = MegatronIndex.from_bytes(written.companions[".idx"], "s.idx")
    assert megatron.dtype == np.uint16 and path.read_bytes() == b"\x01\x00\xff\xff"
