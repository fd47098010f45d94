"""The write pass passes a format's companions through: a worker's token shard task returns an
entry that lists them, and the commit publishes and verifies them."""

from __future__ import annotations

import numpy as np
from helpers.versions import TOKEN_FIELDS, token_samples

from datapipe.builder.commit import commit
from datapipe.builder.passes import write_shard_task
from datapipe.formats.base import KEY
from datapipe.formats.tokens.writer import TokensShardWriter
from datapipe.loader.dataset import open_dataset
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store
from datapipe.versioning.verify import verify_version


def piece(docs: list[dict], positions: np.ndarray):
    """One partition's documents as the build moves them: output positions and a block."""
    names = ("tokens", "url")
    block = TokensShardWriter.encode_samples(
        [d[KEY] for d in docs], {n: [d[n] for d in docs] for n in names}
    )
    return positions, block


def test_a_token_shard_written_by_the_write_task_is_committed_with_its_companions(tmp_path):
    store = Store(str(tmp_path / "store"))
    writer = store.begin("toks")
    docs = token_samples(0)
    # two partitions, their documents interleaved in the shard as a shuffled build does
    pieces = [piece(docs[0::2], np.arange(0, 10, 2)), piece(docs[1::2], np.arange(1, 10, 2))]
    entry, written = write_shard_task(
        store.fs, writer.partial, "shard-000000.bin", "tokens", frozenset({"other"}), *pieces
    )
    assert written and [c.suffix for c in entry.companions] == [".idx", ".docs"]
    manifest = Manifest(name="toks", shard_format="tokens", fields=TOKEN_FIELDS, shards=(entry,))
    committed = commit(writer, manifest, None, ("latest",))
    assert committed.format_version == 3 and verify_version(store, "toks", committed) == []
    with open_dataset(f"{store.url}/toks") as ds:
        assert all(np.array_equal(ds.tokens(i), d["tokens"]) for i, d in enumerate(docs))
        assert [ds[i]["url"] for i in range(10)] == [d["url"] for d in docs]
