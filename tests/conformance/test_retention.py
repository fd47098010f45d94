"""Leases, retention and history on every backend: what gc keeps, what it deletes, and what `log`
says."""

from __future__ import annotations

import json
import os

from helpers.versions import commit_first, commit_sharing, shard_samples

from datapipe.loader.dataset import open_dataset
from datapipe.storage.fs import put_atomic
from datapipe.versioning.gc import collect
from datapipe.versioning.history import history, usage
from datapipe.versioning.leases import (
    LeaseRecord,
    held_versions,
    lease_path,
    read_leases,
    take_lease,
)
from datapipe.versioning.retention import PRUNED_NAME
from datapipe.versioning.store import Store
from datapipe.versioning.verify import verify_version


def chain(store: Store, n: int = 4):
    """n versions, each rewriting one more shard of 3 (and sharing the rest of its parent's)."""
    versions = [commit_first(store)]
    for i in range(1, n):
        versions.append(commit_sharing(store, versions[-1], rewrite={(i - 1) % 3: i}))
    return versions


def files(store: Store, version: str) -> list[str]:
    root = store.path("toy", "versions", version)
    return (
        sorted(p.rsplit("/", 1)[-1] for p in store.fs.find(root)) if store.fs.exists(root) else []
    )


class TestRetention:
    def test_keep_last_deletes_the_rest_but_keeps_files_kept_versions_share(
        self, backend, tmp_path
    ):
        store = Store(backend.url, backend.options)
        v = chain(store)  # v1 rewrote shard 0, v2 shard 1, v3 shard 2
        assert [s.stored_in for s in v[3].shards] == [v[1].version, v[2].version, None]
        dry = collect(store, "toy", keep_last=1, dry_run=True)
        assert store.versions("toy") == sorted(x.version for x in v)  # a dry run deletes nothing
        assert {d.version for d in dry.plan.doomed} == {v[0].version, v[1].version, v[2].version}
        report = collect(store, "toy", keep_last=1)
        assert store.versions("toy") == [v[3].version]
        assert files(store, v[0].version) == []  # nothing of v0 is listed by v3
        assert files(store, v[1].version) == [
            PRUNED_NAME,
            "shard-000000.tar",
            "shard-000000.tar.idx",
        ]
        assert files(store, v[2].version) == [
            PRUNED_NAME,
            "shard-000001.tar",
            "shard-000001.tar.idx",
        ]
        assert verify_version(store, "toy", v[3]) == [] and report.plan.bytes > 0
        with open_dataset(
            f"{backend.url}/toy", backend.options, cache_dir=tmp_path / "cache"
        ) as ds:
            assert [ds[i]["bin"] for i in range(0, 30, 10)] == [
                shard_samples(i, i + 1)[0]["bin"] for i in range(3)
            ]
        assert usage(store, "toy")["stored_bytes"] == v[3].bytes
        entries, problems = history(store, "toy")
        assert [(e.version, e.parent_state) for e in entries] == [
            (v[3].version, "pruned")
        ] and problems == []

    def test_tagged_latest_and_leased_versions_are_never_deleted(self, backend, tmp_path):
        store = Store(backend.url, backend.options)
        v = chain(store)
        store.set_ref("toy", "paper", v[0].version)
        lease = take_lease(store, "toy", v[1].version, 3600, "a long job")
        reader = open_dataset(
            f"{backend.url}/toy@{v[2].version[:12]}", backend.options, cache_dir=tmp_path / "c"
        )
        report = collect(store, "toy", keep_last=0, keep_within=None)
        assert store.versions("toy") == sorted(x.version for x in v)
        assert report.plan.kept[v[0].version] == ["tag paper"] and report.plan.kept[
            v[3].version
        ] == ["latest"]
        assert report.plan.kept[v[1].version] == [f"leased {lease.id}"]
        reader.close()  # its lease goes with it
        collect(store, "toy", prune=True)
        assert v[2].version not in store.versions("toy")

    def test_expired_dead_and_damaged_leases_hold_nothing(self, backend):
        store = Store(backend.url, backend.options)
        v = chain(store, 2)
        store.set_ref("toy", "latest", v[1].version)
        dead = LeaseRecord(
            "0" * 16,
            v[0].version,
            os.uname().nodename,
            _dead_pid(),
            "2020-01-01T00:00:00+00:00",
            "2999-01-01T00:00:00+00:00",
        )
        expired = LeaseRecord(
            "1" * 16,
            v[0].version,
            "elsewhere",
            None,
            "2020-01-01T00:00:00+00:00",
            "2020-01-02T00:00:00+00:00",
        )
        for record in (dead, expired):
            put_atomic(store.fs, lease_path(store, "toy", record.id), record.to_json())
        put_atomic(store.fs, lease_path(store, "toy", "2" * 16), b'{"id": "cut sh')
        held, damaged = held_versions(store, "toy")
        assert held == {} and [d.path.rsplit("/", 1)[-1] for d in damaged] == [
            "2222222222222222.json"
        ]
        assert {r.state() for r in read_leases(store, "toy")[0]} == {"dead", "expired"}
        report = collect(store, "toy", prune=True)
        assert store.versions("toy") == [v[1].version] and len(report.plan.damaged) == 1

    def test_a_gc_interrupted_between_marker_and_manifest_is_finished_or_undone(self, backend):
        store = Store(backend.url, backend.options)
        v = chain(store, 2)
        marker = store.path("toy", "versions", v[0].version, PRUNED_NAME)
        # died right here
        put_atomic(store.fs, marker, json.dumps({"version": v[0].version}).encode())
        store.set_ref("toy", "keep", v[0].version)
        collect(store, "toy", prune=True)  # kept now: the stale marker goes
        assert not store.fs.exists(marker) and verify_version(store, "toy", v[0]) == []
        store.fs.rm_file(store.path("toy", "refs", "keep"))
        put_atomic(store.fs, marker, b"{}")
        # died after the manifest
        store.fs.rm_file(store.path("toy", "versions", v[0].version, "manifest.json"))
        collect(store, "toy")  # a plain gc leaves a pruned directory alone
        assert PRUNED_NAME in files(store, v[0].version)
        collect(store, "toy", prune=True)
        assert files(store, v[0].version) == [
            PRUNED_NAME,
            "shard-000001.tar",
            "shard-000001.tar.idx",
            # v1 shares them
            "shard-000002.tar",
            "shard-000002.tar.idx",
        ]


class TestHistory:
    def test_log_compares_each_version_with_its_parent_and_reports_a_dangling_tag(self, backend):
        store = Store(backend.url, backend.options)
        v = chain(store, 3)
        store.set_ref("toy", "old", v[0].version)
        put_atomic(store.fs, store.path("toy", "refs", "gone"), b"f" * 64 + b"\n")
        entries, problems = history(store, "toy")
        assert [e.version for e in entries] == [v[2].version, v[1].version, v[0].version]
        assert entries[0].changes == {"added": 0, "removed": 0, "changed": 10, "unchanged": 20}
        assert (
            entries[0].tags == ["latest"]
            and entries[2].tags == ["old"]
            and entries[2].parent_state is None
        )
        own = v[2].shards[1].bytes
        assert entries[0].own_bytes == own and entries[0].shared_bytes == v[2].bytes - own
        assert len(problems) == 1 and problems[0].startswith(
            f"ref gone names version {'f' * 64}, which is missing"
        )


def _dead_pid() -> int:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid
