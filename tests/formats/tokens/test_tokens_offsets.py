"""Token shards past 2^32 bytes and 10^11 tokens, on sparse files: nothing that size is written."""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from datapipe.formats.base import KEY
from datapipe.formats.index import IndexBuilder, ShardIndex
from datapipe.formats.shards import open_shard
from datapipe.formats.tokens.docs import DocumentTableBuilder
from datapipe.formats.tokens.megatron import MAX_LENGTH, MegatronIndex
from datapipe.formats.tokens.writer import TOKENS_FORMAT_CODE

with warnings.catch_warnings():  # it warns that Transformer Engine and Apex are not installed
    warnings.simplefilter("ignore")
    from megatron.core.datasets.indexed_dataset import IndexedDataset

FIRST = np.array([3, 1, 4], np.int64)
LAST = np.array([1, 5, 9, 2, 6], np.int64)
HOLES = 47  # documents of MAX_LENGTH zero ids between them: 1.009e11 tokens in all


def sparse_shard(directory: Path, dtype: np.dtype) -> tuple[Path, MegatronIndex]:
    """A shard of FIRST, HOLES documents of MAX_LENGTH ids and LAST: ``.bin`` is a sparse file
    with only FIRST and LAST written, the middle documents' hashes in the index are made up
    (opening a shard checks the first and the last)."""
    lengths = [len(FIRST), *[MAX_LENGTH] * HOLES, len(LAST)]
    megatron = MegatronIndex.for_lengths(np.array(lengths), dtype)
    path = directory / "big.bin"
    with open(path, "wb") as f:
        f.truncate(megatron.bin_size())
        for ids, at in ((FIRST, 0), (LAST, int(megatron.pointers[-1]))):
            f.seek(at)
            f.write(ids.astype(dtype).tobytes())
    (directory / "big.idx").write_bytes(megatron.to_bytes())
    docs, index = DocumentTableBuilder(), IndexBuilder(TOKENS_FORMAT_CODE)
    for i, (start, n) in enumerate(zip(megatron.pointers.tolist(), lengths, strict=True)):
        docs.add(f"doc-{i:02d}", "raw/web.jsonl", i, {})
        end = start + n * dtype.itemsize
        ids = FIRST if i == 0 else LAST if i == len(lengths) - 1 else None
        digest = hashlib.sha256(b"" if ids is None else ids.astype(dtype).tobytes()).digest()
        index.add(f"doc-{i:02d}", start, end, digest, [("tokens", start, end - start)], ())
    (directory / "big.docs").write_bytes(docs.build().to_bytes())
    (directory / "big.bin.idx").write_bytes(index.build(megatron.bin_size()).to_bytes())
    return path, megatron


@pytest.mark.parametrize("dtype", [np.dtype("<u2"), np.dtype("<i4")], ids=str)
def test_offsets_past_2_to_the_32_read_back(tmp_path, dtype):
    path, megatron = sparse_shard(tmp_path, dtype)
    assert int(megatron.lengths.astype(np.int64).sum()) > 10**11
    assert int(megatron.pointers[-1]) > 2**36 and os.path.getsize(path) > 2**37
    parsed = MegatronIndex.from_bytes((tmp_path / "big.idx").read_bytes(), "big.idx")
    assert np.array_equal(parsed.pointers, megatron.pointers)
    assert parsed.lengths[1] == MAX_LENGTH
    dataset = IndexedDataset(str(tmp_path / "big"))
    assert dataset[0].tolist() == FIRST.tolist() and dataset[HOLES + 1].tolist() == LAST.tolist()
    assert int(dataset.index.sequence_pointers[-1]) == int(megatron.pointers[-1])
    assert dataset.sequence_lengths[1] == MAX_LENGTH
    del dataset
    for use_index in (True, False):
        with open_shard(path, index=use_index) as reader:
            assert len(reader) == HOLES + 2
            assert reader.tokens(-1).tolist() == LAST.tolist()
            assert reader[0]["tokens"].tolist() == FIRST.tolist()
            assert reader[-1][KEY] == f"doc-{HOLES + 1:02d}"
            assert int(reader.lengths.sum()) == int(megatron.lengths.astype(np.int64).sum())
            assert reader.origin(HOLES + 1) == ("raw/web.jsonl", HOLES + 1)
    index = ShardIndex.from_bytes((tmp_path / "big.bin.idx").read_bytes(), "big.bin.idx")
    assert int(index.sample_start[-1]) == int(megatron.pointers[-1])


def test_megatron_index_of_a_version_of_10_to_the_11_tokens(tmp_path):
    """Pointers and counts are 64-bit: lengths summing past 2^32 (and 10^11) round-trip."""
    lengths = np.full(60, MAX_LENGTH, np.int64)
    index = MegatronIndex.for_lengths(lengths, np.dtype("<i4"))
    parsed = MegatronIndex.from_bytes(index.to_bytes(), "x.idx")
    assert parsed.bin_size() == 60 * MAX_LENGTH * 4 > 10**11 * 4
    assert parsed.pointers.tolist() == [i * MAX_LENGTH * 4 for i in range(60)]
