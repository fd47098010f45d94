"""One suite, every storage backend: the same tests of datapipe.storage and of the store's commit
protocol against local disk, fsspec's memory:// and S3 (moto's server on 127.0.0.1), as fsspec's own
tests/abstract/ do."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from sample_data import simple_samples

from datapipe.errors import NotFoundError, ShardCorruptError
from datapipe.formats.registry import get_format
from datapipe.storage.cache import ShardCache
from datapipe.storage.fs import (
    CHUNK,
    is_local,
    open_atomic,
    put_atomic,
    read_bytes,
    sha256_of,
    url_of,
)
from datapipe.versioning.gc import collect
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store
from datapipe.versioning.verify import verify_version


def commit_toy(store: Store, shards: int = 3) -> Manifest:
    """A webdataset version of ``shards`` shards of 10 samples each, committed with the refs latest
    and v1."""
    writer = store.begin("toy")
    samples = simple_samples(10 * shards, size=300)
    entries = tuple(
        writer.write_shard(i, samples[10 * i : 10 * (i + 1)], get_format("webdataset"))
        for i in range(shards)
    )
    return writer.commit(
        Manifest(
            name="toy",
            shard_format="webdataset",
            fields={"bin": "bytes", "cls": "bytes"},
            shards=entries,
        ),
        ("latest", "v1"),
    )


class TestStorage:
    """What the library relies on from a storage backend, and the store built on it."""

    def test_a_url_names_its_filesystem_and_back(self, backend):
        fs, root = backend.fs()
        assert is_local(fs) == (backend.name == "local")
        url = url_of(fs, f"{root}/a/b.bin")
        assert url.endswith("/a/b.bin") and (
            url.startswith(f"{backend.name}://") or backend.name == "local"
        )

    def test_put_atomic_then_read_bytes(self, backend):
        fs, root = backend.fs()
        put_atomic(fs, f"{root}/deep/er/file.bin", b"first")
        assert read_bytes(fs, f"{root}/deep/er/file.bin") == b"first"
        put_atomic(fs, f"{root}/deep/er/file.bin", b"second")  # replaced whole
        assert read_bytes(fs, f"{root}/deep/er/file.bin") == b"second"
        # no temporary left beside it
        assert [p.rsplit("/", 1)[-1] for p in fs.find(root)] == ["file.bin"]

    def test_a_write_that_fails_leaves_nothing(self, backend):
        fs, root = backend.fs()
        path = f"{root}/broken.bin"
        with pytest.raises(RuntimeError, match="writer died"), open_atomic(fs, path) as f:
            f.write(b"x" * 1000)
            raise RuntimeError("writer died")
        assert not fs.exists(path)
        assert not fs.exists(root) or fs.find(root) == []  # no temporary either

    def test_a_missing_file_is_not_found_naming_it(self, backend):
        fs, root = backend.fs()
        with pytest.raises(NotFoundError, match=r"nowhere\.bin: no such file"):
            read_bytes(fs, f"{root}/nowhere.bin")
        with pytest.raises(NotFoundError, match=r"nowhere\.bin: no such file"):
            sha256_of(fs, f"{root}/nowhere.bin")

    def test_sha256_of_a_file_larger_than_a_chunk(self, backend):
        fs, root = backend.fs()
        data = os.urandom(CHUNK + 12345)
        with open_atomic(fs, f"{root}/big.bin") as f:
            f.write(data[:CHUNK])
            f.write(data[CHUNK:])
        assert sha256_of(fs, f"{root}/big.bin") == hashlib.sha256(data).hexdigest()

    def test_the_cache_downloads_verified_copies(self, backend, tmp_path):
        fs, root = backend.fs()
        data = os.urandom(5000)
        put_atomic(fs, f"{root}/shard-000000.tar", data)
        cache = ShardCache(tmp_path / "cache")
        with cache.open(
            fs, f"{root}/shard-000000.tar", hashlib.sha256(data).hexdigest(), len(data)
        ) as cached:
            assert Path(cached.path).read_bytes() == data
        put_atomic(fs, f"{root}/shard-000001.tar", b"y" * len(data))  # not what the manifest says
        with pytest.raises(ShardCorruptError, match="sha256 does not match the manifest"):
            cache.open(fs, f"{root}/shard-000001.tar", hashlib.sha256(data).hexdigest(), len(data))

    def test_a_commit_publishes_a_version_that_verifies_and_has_the_same_id_everywhere(
        self, backend, tmp_path
    ):
        store = Store(backend.url, backend.options)
        manifest = commit_toy(store)
        # the version id is the content's
        reference = commit_toy(Store(str(tmp_path / "reference")))
        assert manifest.version == reference.version
        assert store.datasets() == ["toy"] and store.versions("toy") == [manifest.version]
        assert store.refs("toy") == {"latest": manifest.version, "v1": manifest.version}
        assert store.resolve("toy", manifest.version[:8]) == manifest.version
        assert store.manifest("toy", manifest.version) == manifest
        assert verify_version(store, "toy", manifest) == []
        assert collect(store, "toy").removed == []  # nothing left over by the commit

    def test_gc_removes_an_abandoned_partial_version_and_keeps_the_complete_one(self, backend):
        store = Store(backend.url, backend.options)
        manifest = commit_toy(store, shards=1)
        abandoned = store.begin("toy")
        abandoned.write_shard(0, simple_samples(3), get_format("webdataset"))
        # its writer died before it said who it was
        store.fs.rm_file(f"{abandoned.partial}/.owner.json")
        assert collect(store, "toy").removed == [abandoned.partial]
        assert not store.fs.exists(abandoned.partial)
        assert (
            store.versions("toy") == [manifest.version]
            and verify_version(store, "toy", manifest) == []
        )
