"""Encoded blocks of documents (the build's path) give the shard that writing each one gives."""

from __future__ import annotations

import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from datapipe.formats.base import KEY
from datapipe.formats.encoded import in_output_order
from datapipe.formats.shards import write_shard
from datapipe.formats.tokens.writer import ROW, SOURCE, TokensShardWriter

SUFFIXES = (".bin", ".idx", ".docs", ".bin.idx")


def document(i: int, n: int) -> dict:
    doc = {KEY: f"d{i:03d}", "tokens": (np.arange(n) * 7 + i).astype(np.uint16)}
    doc["url"] = f"https://example.org/{i}".encode()
    doc[SOURCE], doc[ROW] = f"raw/{i % 2}.jsonl", i
    return doc


def columns(docs: list[dict]) -> tuple[list[str], dict[str, list]]:
    names = sorted({n for d in docs for n in d if n != KEY})
    return [d[KEY] for d in docs], {n: [d[n] for d in docs] for n in names}


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 50), min_size=1, max_size=30).filter(sum),
    cuts=st.lists(st.integers(0, 30), max_size=4),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_blocks_write_the_shard_that_documents_write(
    tmp_path_factory, lengths, cuts, shuffle, seed
):
    docs = [document(i, n) for i, n in enumerate(lengths)]
    n = len(docs)
    # output position of each document (a shuffled build interleaves partitions)
    positions = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
    bounds = sorted({0, n, *(c for c in cuts if c < n)})
    pieces = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        block = TokensShardWriter.encode_samples(*columns(docs[a:b]))
        block = pickle.loads(pickle.dumps(block, protocol=5))  # as Dask moves it
        pieces.append((positions[a:b], block))
    directory = tmp_path_factory.mktemp("blocks")
    in_order = [docs[i] for i in np.argsort(positions, kind="stable")]
    write_shard(directory / "one.bin", in_order, "tokens")
    write_shard(directory / "blocks.bin", in_output_order(pieces), "tokens")
    for suffix in SUFFIXES:
        one = (directory / f"one{suffix}").read_bytes()
        assert (directory / f"blocks{suffix}").read_bytes() == one, suffix


def test_sample_sizes_are_the_bytes_of_the_ids():
    docs = [document(i, n) for i, n in enumerate([3, 0, 5])]
    sizes = TokensShardWriter.sample_sizes(*columns(docs))
    assert sizes.tolist() == [6, 0, 10]
