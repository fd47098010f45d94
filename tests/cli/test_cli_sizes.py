"""Sizes that add up: `ls`, `log` and `du` on versions whose shards are hard links (an incremental
build's reuse), checked against the files on disk."""

from __future__ import annotations

import json
import os
import textwrap

from helpers.cli import datapipe_in_process as run
from helpers.cli import on_session_cluster
from helpers.versions import commit_first, commit_sharing

from datapipe.versioning.store import Store

PIPELINE = """\
    name: rows
    source: {path: raw/*.csv, format: csv}
    sample: {key: id, fields: {cls: label, txt: text}}
    shards: {max_bytes: 20KB}
    """


def write_file(root, n: int, salt: str = "") -> None:
    lines = ["id,label,text"] + [
        f"f{n:03d}r{i:04d},{i % 10},{salt}{'x' * (40 + (n * 7 + i) % 90)}" for i in range(120)
    ]
    (root / "raw").mkdir(exist_ok=True)
    (root / "raw" / f"f{n:03d}.csv").write_text("\n".join(lines) + "\n")


def inodes(root) -> dict[tuple[int, int], tuple[int, int]]:
    """(device, inode) -> (size, links) of every file under ``root``, each inode once."""
    found = {}
    for top, _dirs, files in os.walk(root):
        for f in files:
            info = os.lstat(os.path.join(top, f))
            found[(info.st_dev, info.st_ino)] = (info.st_size, info.st_nlink)
    return found


def test_hard_linked_versions_count_as_shared_and_du_totals_the_disk(tmp_path, scheduler):
    (tmp_path / "pipeline.yaml").write_text(textwrap.dedent(PIPELINE))
    for n in range(4):
        write_file(tmp_path, n)
    for edit in range(2):
        out = run("build", "pipeline.yaml", *on_session_cluster(scheduler), cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        write_file(tmp_path, 9 + edit)  # a new file: the next build reuses the others' shards
    store = Store(str(tmp_path / "storage"))
    first, second = sorted(
        (store.manifest("rows", v) for v in store.versions("rows")), key=lambda m: m.created_at
    )
    files = inodes(tmp_path / "storage")
    # the reuse is hard links: one inode under both versions' names, and no stored_in
    linked = [
        s
        for s in second.shards
        if os.stat(store.shard_file("rows", second.version, s)).st_nlink > 1
    ]
    assert linked and all(s.stored_in is None for s in second.shards)
    shared = sum(s.bytes for s in linked)
    assert 0 < shared < second.bytes

    rows = {
        r["version"]: r for r in json.loads(run("ls", "storage", "--json", cwd=tmp_path).stdout)
    }
    assert rows[second.version]["shared_bytes"] == shared
    assert rows[first.version]["shared_bytes"] == shared  # the parent's files are the same ones
    for m in (first, second):
        r = rows[m.version]
        assert r["own_bytes"] + r["shared_bytes"] == r["bytes"] == m.bytes
    entries = json.loads(run("log", "storage/rows", "--json", cwd=tmp_path).stdout)
    assert [(e["own_bytes"], e["shared_bytes"]) for e in entries] == [
        (rows[m.version]["own_bytes"], rows[m.version]["shared_bytes"]) for m in (second, first)
    ]
    text = run("log", "storage/rows", cwd=tmp_path).stdout
    assert "0 B shared" not in text

    du = json.loads(run("du", "storage", "--json", cwd=tmp_path).stdout)
    d, total = du["datasets"]["rows"], du["total"]
    assert total["disk_bytes"] == sum(size for size, _ in files.values())
    assert d["shared_bytes"] == shared  # each file once
    assert d["own_bytes"] == first.bytes + second.bytes - 2 * shared
    assert d["stored_bytes"] == d["own_bytes"] + d["shared_bytes"]
    assert d["disk_bytes"] == d["stored_bytes"] + d["other_bytes"] == total["disk_bytes"]
    assert d["listed_bytes"] == first.bytes + second.bytes and d["missing_files"] == 0
    table = run("du", "storage", cwd=tmp_path).stdout.splitlines()
    assert table[0].split() == ["DATASET", "VERSIONS", "OWN", "SHARED", "OTHER", "ON", "DISK"]
    assert table[1].split()[:2] == ["rows", "2"] and table[2].split()[0] == "total"


def test_du_counts_what_lies_beside_the_datasets_and_warns_of_missing_shards(tmp_path):
    store = Store(str(tmp_path / "storage"))
    v0 = commit_first(store)
    v1 = commit_sharing(store, v0, rewrite={0: 1})  # shares shards 1, 2 through stored_in
    (tmp_path / "storage" / "notes.txt").write_text("x" * 1000)
    du = json.loads(run("du", "storage", "--json", cwd=tmp_path).stdout)
    d, total = du["datasets"]["toy"], du["total"]
    assert d["shared_bytes"] == v0.shards[1].bytes + v0.shards[2].bytes
    assert d["own_bytes"] == v0.shards[0].bytes + v1.shards[0].bytes
    assert total["disk_bytes"] == d["disk_bytes"] + 1000
    assert total["other_bytes"] == d["other_bytes"] + 1000
    assert total["disk_bytes"] == sum(size for size, _ in inodes(tmp_path / "storage").values())
    os.remove(store.shard_file("toy", v1.version, v1.shards[0]))
    out = run("du", "storage/toy", cwd=tmp_path)
    assert out.returncode == 0
    assert out.stderr == (
        "warning: toy: 1 shard files its manifests list are missing; "
        "`datapipe verify storage/toy@VERSION` names them\n"
    )
