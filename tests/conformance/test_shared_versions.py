"""Versions that share shards (``stored_in``), on every backend: read back whole, verified, cached
once."""

from __future__ import annotations

import pytest
from helpers.versions import FIELDS, commit_first, commit_sharing, shard_samples

from datapipe.errors import NotFoundError
from datapipe.loader.dataset import open_dataset
from datapipe.loader.loader import Loader
from datapipe.storage.cache import ShardCache
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store
from datapipe.versioning.verify import verify_version


def expected(seeds: list[int]) -> dict[str, bytes]:
    """key -> payload of a version whose shard i holds shard_samples(i, seeds[i])."""
    return {s["__key__"]: s["bin"] for i, seed in enumerate(seeds) for s in shard_samples(i, seed)}


def read_all(url: str, options: dict, tmp_path) -> dict[str, bytes]:
    with Loader(
        url,
        batch_size=10,
        shuffle=False,
        num_workers=0,
        storage_options=options,
        cache_dir=tmp_path / "cache",
    ) as loader:
        return {
            k: bytes(b)
            for batch in loader
            for k, b in zip(batch["__key__"], batch["bin"], strict=True)
        }


class TestSharedShards:
    def test_a_version_sharing_its_parents_shards_reads_back_whole(self, backend, tmp_path):
        store = Store(backend.url, backend.options)
        first = commit_first(store)
        second = commit_sharing(store, first, rewrite={1: 7}, add=1)
        assert [s.stored_in for s in second.shards] == [first.version, None, first.version, None]
        assert second.parent == first.version and second.shared_bytes == first.shards[0].bytes * 2
        own = sorted(
            p.rsplit("/", 1)[-1]
            for p in store.fs.find(store.path("toy", "versions", second.version))
        )
        assert own == [
            "manifest.json",
            "shard-000001.tar",
            "shard-000001.tar.idx",
            "shard-000003.tar",
            "shard-000003.tar.idx",
        ]  # the shared ones are not copied
        assert read_all(f"{backend.url}/toy", backend.options, tmp_path) == expected([0, 7, 0, 0])
        assert read_all(
            f"{backend.url}/toy@{first.version[:12]}", backend.options, tmp_path
        ) == expected([0, 0, 0])
        assert verify_version(store, "toy", second) == []
        with open_dataset(f"{backend.url}/toy", backend.options, cache_dir=tmp_path / "c2") as ds:
            assert ds[0]["bin"] == shard_samples(0)[0]["bin"]

    def test_a_grandchild_points_at_the_directory_that_holds_the_file(self, backend, tmp_path):
        store = Store(backend.url, backend.options)
        first = commit_first(store)
        second = commit_sharing(store, first, rewrite={1: 7})
        third = commit_sharing(store, second, rewrite={2: 9})
        assert [s.stored_in for s in third.shards] == [first.version, second.version, None]
        assert read_all(f"{backend.url}/toy", backend.options, tmp_path) == expected([0, 7, 9])
        assert verify_version(store, "toy", third) == []

    def test_a_missing_shared_file_is_named_by_verify_and_the_loader(self, backend, tmp_path):
        store = Store(backend.url, backend.options)
        first = commit_first(store)
        second = commit_sharing(store, first, rewrite={0: 5})
        store.fs.rm_file(store.shard_file("toy", first.version, first.shards[2]))
        problems = [str(p) for p in verify_version(store, "toy", second)]
        assert problems == [
            f"missing: {store.path('toy', 'versions', first.version, 'shard-000002.tar')} "
            "(shared from another version's directory)"
        ]
        with pytest.raises(NotFoundError, match=rf"{first.version}/shard-000002.tar: missing"):
            Loader(
                f"{backend.url}/toy",
                num_workers=0,
                storage_options=backend.options,
                cache_dir=tmp_path / "cache",
            )

    def test_sizes_add_up_to_what_the_store_holds(self, backend):
        from datapipe.versioning.history import history
        from datapipe.versioning.sizes import usage

        store = Store(backend.url, backend.options)
        first = commit_first(store)
        second = commit_sharing(store, first, rewrite={1: 7}, add=1)
        u = usage(store, "toy")
        shared = first.shards[0].bytes + first.shards[2].bytes
        assert (u["own_bytes"], u["shared_bytes"]) == (
            first.bytes - shared + second.bytes - shared,
            shared,
        )
        found = store.fs.find(store.path("toy"), detail=True)
        assert u["disk_bytes"] == sum(info["size"] for info in found.values())
        assert u["disk_bytes"] == u["stored_bytes"] + u["other_bytes"] and u["other_bytes"] > 0
        sizes = {e.version: (e.own_bytes, e.shared_bytes) for e in history(store, "toy")[0]}
        assert sizes == {
            first.version: (first.bytes - shared, shared),
            second.version: (second.bytes - shared, shared),
        }

    def test_a_shared_shard_is_cached_once(self, backend, tmp_path):
        if backend.name == "local":
            pytest.skip("local stores are read in place, without a cache")
        store = Store(backend.url, backend.options)
        first = commit_first(store)
        commit_sharing(store, first, rewrite={1: 7})
        for ref in (first.version[:12], "latest"):
            read_all(f"{backend.url}/toy@{ref}", backend.options, tmp_path)
        # 3 + 1 rewritten shards, with indexes
        assert len(ShardCache(tmp_path / "cache").entries()) == 2 * 4


def test_stored_in_is_not_part_of_the_version_id_and_absent_from_json_when_none():
    entry = commit_entry()
    plain = Manifest(name="toy", shard_format="webdataset", fields=FIELDS, shards=(entry,))
    shared = Manifest(
        name="toy",
        shard_format="webdataset",
        fields=FIELDS,
        shards=(entry.__class__(**{**vars(entry), "stored_in": "a" * 64}),),
    )
    assert plain.content_id() == shared.content_id()
    assert b"stored_in" not in plain.to_json() and b'"stored_in": "' + b"a" * 64 in shared.to_json()
    assert Manifest.from_json(shared.with_id().to_json(), "m").shards[0].stored_in == "a" * 64


def commit_entry():
    from datapipe.versioning.manifest import ShardEntry

    return ShardEntry(
        path="shard-000000.tar",
        samples=1,
        bytes=10,
        sha256="b" * 64,
        index_path="shard-000000.tar.idx",
        index_bytes=5,
        index_sha256="c" * 64,
    )
