"""Versions of token shards, whose companions (NAME.idx, NAME.docs) go wherever the shard goes, on
every backend: committed, verified, reused by a child, sized, gc'd and read through the cache."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from helpers.versions import commit_token_child, commit_tokens, token_samples

from datapipe.errors import NotFoundError, ShardCorruptError
from datapipe.formats.base import KEY
from datapipe.loader.dataset import open_dataset
from datapipe.storage.cache import ShardCache
from datapipe.versioning.gc import collect
from datapipe.versioning.retention import PRUNED_NAME
from datapipe.versioning.sizes import usage
from datapipe.versioning.store import Store
from datapipe.versioning.verify import verify_version

SUFFIXES = (".bin", ".bin.idx", ".idx", ".docs")


def files(store: Store, version: str) -> list[str]:
    root = store.path("toks", "versions", version)
    return (
        sorted(p.rsplit("/", 1)[-1] for p in store.fs.find(root)) if store.fs.exists(root) else []
    )


def shard_files(*numbers: int) -> list[str]:
    return [f"shard-{n:06d}{suffix}" for n in numbers for suffix in SUFFIXES]


def read_back(backend, ref: str, cache) -> list[tuple[str, bytes, np.ndarray]]:
    """Every document of toks@ref: key, url and ids (through ``tokens(i)``, copied)."""
    with open_dataset(f"{backend.url}/toks@{ref}", backend.options, cache_dir=cache) as ds:
        return [(ds[i][KEY], ds[i]["url"], ds.tokens(i).copy()) for i in range(len(ds))]


def written(*shards: list[dict]) -> list[tuple[str, bytes, np.ndarray]]:
    return [(d[KEY], d["url"], d["tokens"]) for docs in shards for d in docs]


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        x[:2] == y[:2] and x[2].dtype == y[2].dtype and np.array_equal(x[2], y[2])
        for x, y in zip(a, b, strict=True)
    )


class TestTokenVersions:
    def test_a_token_version_commits_verifies_and_reads_through_the_cache(self, backend, tmp_path):
        store = Store(backend.url, backend.options)
        docs = [token_samples(0), token_samples(1)]
        m = commit_tokens(store, docs)
        assert files(store, m.version) == ["manifest.json", *sorted(shard_files(0, 1))]
        assert verify_version(store, "toks", m) == []
        assert collect(store, "toks").removed == []
        assert same(read_back(backend, "latest", tmp_path / "cache"), written(*docs))
        if backend.name != "local":  # each shard, its index and its two companions, cached
            assert len(ShardCache(tmp_path / "cache").entries()) == 2 * 4

    @pytest.mark.parametrize("suffix", [".idx", ".docs"])
    def test_a_flipped_companion_byte_is_named_by_verify_and_the_cache(
        self, backend, tmp_path, suffix
    ):
        store = Store(backend.url, backend.options)
        m = commit_tokens(store, [token_samples(0)])
        path = store.path("toks", "versions", m.version, f"shard-000000{suffix}")
        data = bytearray(store.fs.cat_file(path))
        data[-12] ^= 1
        store.fs.pipe_file(path, bytes(data))
        assert [str(p) for p in verify_version(store, "toks", m)] == [
            f"mismatch: {path} (sha256 differs)"
        ]
        # read through the cache, or in place with verify=True: named before a document is read
        with (
            pytest.raises(ShardCorruptError, match="sha256 does not match the manifest") as e,
            open_dataset(
                f"{backend.url}/toks", backend.options, verify=True, cache_dir=tmp_path / "c"
            ) as ds,
        ):
            ds.tokens(0)
        assert e.value.shard.endswith(f"shard-000000{suffix}")

    @pytest.mark.parametrize("suffix", [".idx", ".docs"])
    def test_a_missing_companion_is_named_by_verify_and_the_reader(self, backend, tmp_path, suffix):
        store = Store(backend.url, backend.options)
        m = commit_tokens(store, [token_samples(0)])
        path = store.path("toks", "versions", m.version, f"shard-000000{suffix}")
        store.fs.rm_file(path)
        assert [str(p) for p in verify_version(store, "toks", m)] == [f"missing: {path}"]
        with open_dataset(f"{backend.url}/toks", backend.options, cache_dir=tmp_path / "c") as ds:
            for read in (ds.files.check, lambda: ds.tokens(0)):
                with pytest.raises(NotFoundError, match=f"shard-000000{re.escape(suffix)}: "):
                    read()

    def test_a_child_reuses_token_shards_with_their_companions(self, backend, tmp_path):
        store = Store(backend.url, backend.options)
        parent = commit_tokens(store, [token_samples(0), token_samples(1)])
        child = commit_token_child(store, parent, new=1)
        assert verify_version(store, "toks", child) == []
        # the parent's shards 0 and 1 are the child's 1 and 2, each with its companions
        assert [s.companions for s in child.shards[1:]] == [s.companions for s in parent.shards]
        if backend.name == "local":
            assert files(store, child.version) == ["manifest.json", *sorted(shard_files(0, 1, 2))]
            for old, new in ((0, 1), (1, 2)):
                for a, b in zip(shard_files(old), shard_files(new), strict=True):
                    first = os.stat(store.path("toks", "versions", parent.version, a))
                    assert (
                        first.st_ino
                        == os.stat(store.path("toks", "versions", child.version, b)).st_ino
                    )
        else:  # shared from the parent's directory under the parent's names
            assert files(store, child.version) == ["manifest.json", *sorted(shard_files(0))]
            assert [(s.stored_in, s.stored_as) for s in child.shards[1:]] == [
                (parent.version, ("shard-000000.bin", "shard-000000.bin.idx")),
                (parent.version, ("shard-000001.bin", "shard-000001.bin.idx")),
            ]
        docs = [token_samples(2, 1), token_samples(0), token_samples(1)]
        assert same(read_back(backend, "latest", tmp_path / "cache"), written(*docs))

    def test_sizes_and_gc_keep_companions_with_their_shard(self, backend, tmp_path):
        store = Store(backend.url, backend.options)
        parent = commit_tokens(store, [token_samples(0), token_samples(1)])
        child = commit_token_child(store, parent, new=1)
        u = usage(store, "toks")
        shared = parent.bytes  # the parent's shards and companions, stored once for both
        assert shared == sum(s.data_bytes for s in child.shards[1:])
        assert (u["own_bytes"], u["shared_bytes"]) == (child.bytes - shared, shared)
        assert u["disk_bytes"] == u["stored_bytes"] + u["other_bytes"]
        reader = open_dataset(
            f"{backend.url}/toks@{parent.version[:12]}", backend.options, cache_dir=tmp_path / "c"
        )
        collect(store, "toks", keep_last=1)  # the reader's lease holds the parent whole
        assert store.versions("toks") == sorted([parent.version, child.version])
        assert verify_version(store, "toks", parent) == []
        assert np.array_equal(reader.tokens(19), token_samples(1)[9]["tokens"])
        reader.close()
        collect(store, "toks", keep_last=1)
        assert store.versions("toks") == [child.version]
        # locally the child holds its own links; elsewhere the files it shares stay
        assert files(store, parent.version) == (
            [] if backend.name == "local" else sorted([PRUNED_NAME, *shard_files(0, 1)])
        )
        assert verify_version(store, "toks", child) == []
        docs = [token_samples(2, 1), token_samples(0), token_samples(1)]
        assert same(read_back(backend, "latest", tmp_path / "cache"), written(*docs))
        assert usage(store, "toks")["stored_bytes"] == child.bytes


class TestPackedRows:
    @pytest.mark.parametrize("mode", ["concat", "best-fit"])
    def test_pack_reads_the_same_rows_on_every_backend(self, backend, tmp_path, mode):
        """A packed Loader over a token version gives the rows of the local store's, through the
        cache where the store is remote (its download-ahead holds windows of shards)."""
        import datapipe
        from datapipe.loader.loader import Loader

        shards = [token_samples(n) for n in range(6)]
        commit_tokens(Store(backend.url, backend.options), shards)
        local = tmp_path / "local"
        commit_tokens(Store(str(local)), shards)

        def rows(url, options, **kw):
            loader = Loader(
                url,
                batch_size=2,
                pack=datapipe.pack(16, mode),
                num_workers=0,
                block_shards=2,
                storage_options=options,
                **kw,
            )
            with loader:
                return [(b["input_ids"].tolist(), b["__key__"]) for b in loader]

        want = rows(str(local / "toks"), None)
        got = rows(f"{backend.url}/toks", backend.options, cache_dir=tmp_path / "cache")
        assert got == want and len(want) > 3
