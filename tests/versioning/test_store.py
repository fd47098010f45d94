"""The store on local disk and memory://: commit protocol, refs, resolution, verify, diff, gc."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import commit, two_shards
from helpers.cli import datapipe_in_process
from sample_data import simple_samples

from datapipe.errors import ConfigError, FormatVersionError, NotFoundError
from datapipe.formats.base import KEY
from datapipe.formats.registry import get_format
from datapipe.versioning.gc import collect
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.sample_diff import diff_versions, sample_hashes
from datapipe.versioning.store import Store, open_dataset_url, parse_dataset_url
from datapipe.versioning.verify import verify_version


def test_commit_publishes_a_complete_version(store):
    m = commit(store, two_shards())
    assert store.datasets() == ["digits"]
    assert store.versions("digits") == [m.version]
    assert store.refs("digits") == {"latest": m.version}
    assert m.samples == 30 and len(m.shards) == 2 and m.parent is None
    files = sorted(p.rsplit("/", 1)[-1] for p in store.fs.find(store.path("digits", "versions")))
    assert files == [
        "manifest.json",
        "shard-000000.tar",
        "shard-000000.tar.idx",
        "shard-000001.tar",
        "shard-000001.tar.idx",
    ]  # no partial directory left behind
    assert verify_version(store, "digits", m) == []


def test_version_id_is_content_addressed(store, tmp_path):
    a = commit(store, two_shards())
    other = commit(Store(str(tmp_path / "other")), two_shards())
    assert a.version == other.version  # same content, any store, any time
    b = commit(store, two_shards(seed=1))
    assert b.version != a.version and b.parent == a.version
    assert store.refs("digits")["latest"] == b.version


def test_rebuilding_an_existing_version_only_moves_the_ref(store):
    a = commit(store, two_shards())
    commit(store, two_shards(seed=1))
    shard = store.path("digits", "versions", a.version, "shard-000000.tar")
    before = store.fs.info(shard)
    again = commit(store, two_shards())
    # the stored manifest, untouched
    assert again.version == a.version and again.created_at == a.created_at
    assert store.fs.info(shard) == before
    assert store.refs("digits")["latest"] == a.version


def test_dataset_urls_resolve_refs_tags_and_prefixes(store):
    a = commit(store, two_shards())
    b = commit(store, two_shards(seed=1))
    store.set_ref("digits", "v1", a.version)
    base = store.url
    assert open_dataset_url(f"{base}/digits")[2].version == b.version
    assert open_dataset_url(f"{base}/digits@latest")[2].version == b.version
    assert open_dataset_url(f"{base}/digits@v1")[2].version == a.version
    assert open_dataset_url(f"{base}/digits@{a.version[:6]}")[2].version == a.version
    with pytest.raises(NotFoundError, match="needs 6"):
        open_dataset_url(f"{base}/digits@{a.version[:5]}")
    with pytest.raises(NotFoundError, match="refs: latest, v1"):
        open_dataset_url(f"{base}/digits@nope")
    unknown = "f" * 8 if not {a.version[0], b.version[0]} & {"f"} else "0" * 8
    with pytest.raises(NotFoundError) as e:  # an unknown prefix lists the versions there are
        open_dataset_url(f"{base}/digits@{unknown}")
    assert "no version starting with" in str(e.value)
    assert a.version[:12] in str(e.value) and b.version[:12] in str(e.value)
    with pytest.raises(NotFoundError, match="no dataset 'cats'.*digits"):
        open_dataset_url(f"{base}/cats")


@pytest.mark.broken_manifests  # copies of one manifest under made-up version ids
def test_ambiguous_prefix_lists_candidates(store):
    m = commit(store, two_shards())
    manifest = store.fs.cat_file(store.path("digits", "versions", m.version, "manifest.json"))
    for fake in ("abcdef01" + "0" * 56, "abcdef02" + "0" * 56):
        put(store, store.path("digits", "versions", fake, "manifest.json"), manifest)
    with pytest.raises(ConfigError, match="ambiguous.*abcdef01.*abcdef02"):
        store.resolve("digits", "abcdef")


def test_parse_dataset_url():
    assert parse_dataset_url("storage/digits") == ("storage", "digits", "latest")
    assert parse_dataset_url("s3://b/p/digits@v2") == ("s3://b/p", "digits", "v2")
    assert parse_dataset_url("digits@abc123") == (".", "digits", "abc123")
    for bad in ("", "storage/.hidden", "storage/a b", "storage/..@x"):
        with pytest.raises(ConfigError):
            parse_dataset_url(bad)


def test_partial_versions_are_invisible_and_gc_removes_abandoned_ones(store):
    m = commit(store, two_shards())
    crashed = store.begin("digits")
    crashed.write_shard(0, simple_samples(3), get_format("tar"))
    # the writer "died": its owner file names a process that does not exist
    owner = json.loads(store.fs.cat_file(f"{crashed.partial}/.owner.json"))
    owner["pid"] = _dead_pid()
    store.fs.pipe_file(f"{crashed.partial}/.owner.json", json.dumps(owner).encode())
    live = store.begin("digits")  # this process is alive: gc must leave it alone
    incomplete = store.path("digits", "versions", "f" * 64)
    put(store, f"{incomplete}/shard-000000.tar", b"half a move")
    assert store.versions("digits") == [m.version]
    report = collect(store, "digits")
    assert crashed.partial in report.removed and incomplete in report.removed
    assert report.kept_live == [live.partial]
    assert store.versions("digits") == [m.version] and verify_version(store, "digits", m) == []


def test_prune_only_on_request(store):
    a = commit(store, two_shards())
    b = commit(store, two_shards(seed=1))
    collect(store, "digits")
    assert set(store.versions("digits")) == {a.version, b.version}
    collect(store, "digits", prune=True)
    assert store.versions("digits") == [b.version]


def test_verify_lists_missing_extra_and_mismatched_files(store):
    m = commit(store, two_shards())
    root = store.path("digits", "versions", m.version)
    data = bytearray(store.fs.cat_file(f"{root}/shard-000001.tar"))
    data[600] ^= 1
    store.fs.pipe_file(f"{root}/shard-000001.tar", bytes(data))
    store.fs.rm_file(f"{root}/shard-000000.tar.idx")
    store.fs.pipe_file(f"{root}/stray.bin", b"x")
    problems = {(p.kind, p.path.rsplit("/", 1)[-1]) for p in verify_version(store, "digits", m)}
    assert problems == {
        ("mismatch", "shard-000001.tar"),
        ("missing", "shard-000000.tar.idx"),
        ("extra", "stray.bin"),
    }


def test_diff_by_sample(store):
    samples = simple_samples(30, size=50)
    a = commit(store, [samples[:20], samples[20:]])
    changed = [dict(s) for s in samples[1:]]  # sample 0 removed
    changed[4] = {**changed[4], "bin": b"new"}  # sample 5 changed
    changed.append({KEY: "extra", "cls": b"1", "bin": b"x"})
    # other shard boundaries: diff is by key, not position
    b = commit(store, [changed[:15], changed[15:]])
    d = diff_versions(sample_hashes(store, "digits", a), sample_hashes(store, "digits", b))
    assert (d.added, d.removed, d.changed, d.unchanged) == (
        ["extra"],
        ["sample000000"],
        ["sample000005"],
        28,
    )


@pytest.mark.broken_manifests
def test_unknown_manifest_version_is_a_clear_error(store):
    m = commit(store, two_shards())
    path = store.path("digits", "versions", m.version, "manifest.json")
    raw = json.loads(store.fs.cat_file(path))
    raw["format_version"] = 9
    store.fs.pipe_file(path, json.dumps(raw).encode())
    with pytest.raises(FormatVersionError, match="format version 9"):
        store.manifest("digits", m.version)


def test_a_format_1_version_is_read_and_verified_as_before(store):
    from dataclasses import replace

    from datapipe.versioning.rebuild_report import manifest_differences

    m = commit(store, two_shards())
    # what datapipe 0.1 wrote: the same fields, format 1
    old = replace(m, format_version=1).with_id()
    store.fs.mv(
        store.path("digits", "versions", m.version),
        store.path("digits", "versions", old.version),
        recursive=True,
    )
    store.fs.pipe_file(
        store.path("digits", "versions", old.version, "manifest.json"), old.to_json()
    )
    read = store.manifest("digits", old.version)
    assert read.format_version == 1 and read.content_id() == old.version
    assert not verify_version(store, "digits", read, old.version)
    assert any("manifest format 1 -> 2" in line for line in manifest_differences(read, m))


def test_id_ignores_time_host_and_parent():
    m = Manifest(name="d", shard_format="webdataset", fields={}, shards=())
    from dataclasses import replace

    assert replace(m, created_at="x", host="y", parent="a" * 64).content_id() == m.content_id()
    assert replace(m, fields={"a": "bytes"}).content_id() != m.content_id()


def put(store: Store, path: str, data: bytes) -> None:
    store.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    store.fs.pipe_file(path, data)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def run(*args, cwd=None):
    return datapipe_in_process(*args, cwd=cwd)


def test_cli_ls_info_tag_verify_diff_gc(tmp_path):
    store = Store(str(tmp_path / "storage"))
    a = commit(store, two_shards())
    b = commit(store, two_shards(seed=1))
    assert run("tag", "storage/digits@" + a.version[:8], "v1", cwd=tmp_path).returncode == 0
    rows = json.loads(run("ls", "--json", cwd=tmp_path).stdout)  # default store: ./storage
    assert {(r["version"], tuple(r["tags"])) for r in rows} == {
        (a.version, ("v1",)),
        (b.version, ("latest",)),
    }
    info = json.loads(run("info", "storage/digits@v1", "--json", cwd=tmp_path).stdout)
    assert info["samples"] == 30 and info["shards"]["count"] == 2
    assert run("verify", "storage/digits", cwd=tmp_path).returncode == 0
    d = json.loads(
        run("diff", "storage/digits@v1", "storage/digits", "--json", cwd=tmp_path).stdout
    )
    assert len(d["changed"]) == 30 and d["added"] == d["removed"] == []
    shard = tmp_path / "storage/digits/versions" / b.version / "shard-000000.tar"
    os.truncate(shard, 1024)
    out = run("verify", "storage/digits", cwd=tmp_path)
    assert out.returncode == 1 and "mismatch:" in out.stdout and "shard-000000.tar" in out.stdout
    assert "Traceback" not in out.stderr
    out = run("info", "storage/digits@zzz", cwd=tmp_path)
    assert (
        out.returncode == 3 and out.stderr.startswith("error: ") and "Traceback" not in out.stderr
    )
    assert run("gc", "storage/digits", cwd=tmp_path).returncode == 0


def test_gc_takes_old_partials_from_other_hosts_as_abandoned(store):
    recent, old = store.begin("digits"), store.begin("digits")
    for writer, started in (
        (recent, "2999-01-01T00:00:00+00:00"),
        (old, "2000-01-01T00:00:00+00:00"),
    ):
        owner = {"host": "another-host", "pid": 1, "started": started}
        store.fs.pipe_file(f"{writer.partial}/.owner.json", json.dumps(owner).encode())
    report = collect(store, "digits")
    assert report.removed == [old.partial] and report.kept_live == [recent.partial]


def test_gc_takes_a_partial_without_a_readable_owner_file_as_abandoned(store):
    """The writer died before writing its owner file, or while writing it."""
    missing, cut = store.begin("digits"), store.begin("digits")
    store.fs.rm_file(f"{missing.partial}/.owner.json")
    store.fs.pipe_file(f"{cut.partial}/.owner.json", b'{"host": "')
    assert sorted(collect(store, "digits").removed) == sorted([missing.partial, cut.partial])


def test_keep_last_keeps_the_newest_of_versions_made_in_one_second_whose_ancestors_are_gone(
    tmp_path,
):
    """Six versions committed within a second, the ancestors of the newest pruned: keep_last=1 keeps
    the newest.
    With created_at to the second only, the tie fell to the depth of each version's chain of
    ancestors still in the store, and a version whose parent was gone came last (the gc race test
    saw an older one kept)."""
    from helpers.versions import commit_first, commit_sharing

    from datapipe.versioning.gc import collect
    from datapipe.versioning.retention import newest_first

    store = Store(str(tmp_path / "storage"))
    versions = [commit_first(store)]
    for i in range(1, 4):
        versions.append(commit_sharing(store, versions[-1], rewrite={(i - 1) % 3: i}))
    assert all("." in m.created_at for m in versions)  # to the microsecond
    manifests = {m.version: m for m in versions}
    del manifests[versions[2].version]  # the newest one's parent, gone (as gc leaves a chain)
    newest = newest_first(manifests)
    assert newest[0] == versions[3].version, newest
    collect(store, "toy", keep_last=2)
    assert set(store.versions("toy")) == {versions[3].version, versions[2].version}
