"""A version of 10^11 tokens starts packing in O(shards): rows counted from the manifest, one
window's documents read for the first batch; the files of every other shard do not even exist."""

from __future__ import annotations

import hashlib
import os

import numpy as np

from datapipe.formats.index import IndexBuilder
from datapipe.formats.tokens.docs import DocumentTableBuilder
from datapipe.formats.tokens.megatron import MegatronIndex
from datapipe.formats.tokens.writer import DOCUMENTS, MEGATRON_INDEX, TOKENS_FORMAT_CODE
from datapipe.loader.batches import BatchSource
from datapipe.loader.dataset import Dataset
from datapipe.loader.settings import LoaderSettings
from datapipe.loader.tokens.pack import Pack
from datapipe.loader.tokens.packed_set import PackedSet
from datapipe.loader.world import World
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.manifest_parts import Companion, ShardEntry
from datapipe.versioning.store import Store

SHARDS, DOCS, DOC_TOKENS = 1000, 100, 1_000_000  # 10^11 tokens, 10^5 documents
FAKE = "0" * 64


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def shard_files(shard: int) -> tuple[dict[str, bytes], int]:
    """The index and companions of a shard of DOCS documents of DOC_TOKENS uint16 ids, and the
    size of its ``.bin`` (written sparse: no id is ever read before the first batch)."""
    lengths = np.full(DOCS, DOC_TOKENS, dtype=np.int64)
    megatron = MegatronIndex.for_lengths(lengths, np.dtype(np.uint16))
    docs, index = DocumentTableBuilder(), IndexBuilder(TOKENS_FORMAT_CODE)
    zeros = hashlib.sha256(bytes(2 * DOC_TOKENS)).digest()  # what a sparse document holds
    for i, start in enumerate(megatron.pointers.tolist()):
        key = f"s{shard:04d}-d{i:03d}"
        docs.add(key, None, None, {})
        index.add(key, start, start + 2 * DOC_TOKENS, zeros, [("tokens", start, 2 * DOC_TOKENS)])
    size = megatron.bin_size()
    files = {
        MEGATRON_INDEX: megatron.to_bytes(),
        DOCUMENTS: docs.build().to_bytes(),
        "index": index.build(size).to_bytes(),
    }
    return files, size


def test_a_version_of_10_to_the_11_tokens_starts_from_the_manifest_and_one_window(tmp_path):
    files, size = shard_files(0)
    entries = tuple(
        ShardEntry(
            f"shard-{i:06d}.bin",
            DOCS,
            size,
            FAKE,
            f"shard-{i:06d}.bin.idx",
            len(files["index"]),
            _sha(files["index"]),
            companions=tuple(
                Companion(s, len(files[s]), _sha(files[s])) for s in (MEGATRON_INDEX, DOCUMENTS)
            ),
            tokens=DOCS * DOC_TOKENS,
        )
        for i in range(SHARDS)
    )
    manifest = Manifest(
        name="huge",
        shard_format="tokens",
        fields={"tokens": "ndarray"},
        shards=entries,
        version="e" * 64,
    )
    assert manifest.tokens == 10**11
    ds = Dataset(Store(str(tmp_path / "store")), "huge", manifest)
    rows = PackedSet(ds, Pack(4096), seed=0)  # reads no file at all
    assert len(rows) == SHARDS // 4 * ((4 * DOCS * DOC_TOKENS - 1) // 4096)

    settings = LoaderSettings(batch_size=8, seed=0)
    source = BatchSource(rows, settings, World(0, 8))
    order = source.order()
    first_window = int(order.locate(np.arange(8 * 8))[0][0])
    for shard in rows.files.shards(first_window):  # only this window's files exist
        path = ds.files.path(shard)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(size)
        with open(ds.files.path(shard, index=True), "wb") as f:
            f.write(files["index"])
        for suffix, written in ds.files.companion_paths(shard).items():
            with open(written, "wb") as f:
                f.write(files[suffix])
    batch = next(iter(source.produce(range(1))))
    assert batch["input_ids"].shape == (8, 4096) and not batch["input_ids"].any()
    assert all(
        key.startswith(f"s{rows.files.shards(first_window)[0] // 4 * 4:04d}"[:2])
        for row in batch["__key__"]
        for _, key, _, _ in row
    )
    assert len(rows.files._plans) == 1  # one window's plan: 400 documents
