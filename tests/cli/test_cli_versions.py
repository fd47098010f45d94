"""`datapipe lease|du|log|ls|gc --keep-last` on versions that share shards, in process; bad input is
one line."""

from __future__ import annotations

import json

from helpers.cli import datapipe_in_process as run
from helpers.versions import commit_first, commit_sharing

from datapipe.versioning.store import Store


def three(tmp_path):
    store = Store(str(tmp_path / "storage"))
    v0 = commit_first(store)
    v1 = commit_sharing(store, v0, rewrite={0: 1})
    v2 = commit_sharing(store, v1, rewrite={1: 2}, add=1)
    return store, [v0, v1, v2]


def test_lease_takes_lists_and_releases_and_gc_keeps_the_leased_version(tmp_path):
    store, v = three(tmp_path)
    out = run(
        "lease", f"storage/toy@{v[0].version[:12]}", "--for", "7d", "--note", "paper", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    lease_id = out.stdout.strip()
    assert len(lease_id) == 16 and f"--release {lease_id}" in out.stderr
    listed = run("lease", "storage/toy", cwd=tmp_path).stdout.splitlines()
    assert listed[1].split()[:4] == [lease_id, v[0].version[:12], "manual", "holds"] and listed[
        1
    ].endswith("paper")
    dry = run("gc", "storage/toy", "--keep-last", "1", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert f"keep {v[0].version[:12]} (leased {lease_id})" in dry.stdout.splitlines()
    assert (
        f"would delete version {v[1].version[:12]}: 0 files, 0 B, keeping 2 "
        "files shared by kept versions" in dry.stdout
    )  # v2 shares v1's shard 0
    assert dry.stdout.endswith("(dry run: nothing deleted)\n") and len(store.versions("toy")) == 3
    released = run("lease", "--release", lease_id, cwd=tmp_path).stdout
    assert released == f"released {lease_id} (toy@{v[0].version[:12]})\n"
    out = run("gc", "storage/toy", "--keep-last", "1", cwd=tmp_path)
    assert out.returncode == 0 and store.versions("toy") == [v[2].version]
    assert run("verify", "storage/toy", cwd=tmp_path).returncode == 0


def test_bad_lease_and_gc_input_is_one_line_naming_the_argument(tmp_path):
    three(tmp_path)
    for args, code, message in [
        (("lease", "storage/toy", "--for", "soon"), 2, "error: --for 'soon': not a duration"),
        (
            ("lease", "--release", "0123456789abcdef"),
            3,
            "error: --release 0123456789abcdef: no such lease in",
        ),
        (("lease", "--release", "nope"), 2, "error: --release 'nope': not a lease id"),
        (
            ("gc", "storage/toy", "--keep-within", "a month"),
            2,
            "error: --keep-within 'a month': not a duration",
        ),
        (("gc", "storage/toy", "--keep-last", "-1"), 2, "error: --keep-last -1: give 0 or more"),
        (
            ("log", "storage"),
            2,
            "error: storage is a store, not a dataset: log shows one dataset at a time",
        ),
    ]:
        out = run(*args, cwd=tmp_path)
        assert out.returncode == code and out.stderr.startswith(message), (args, out.stderr)
    # (the last lease released took the folder)
    (tmp_path / "storage/toy/leases").mkdir(exist_ok=True)
    (tmp_path / "storage/toy/leases/bad.json").write_text("{not json")
    out = run("lease", "storage/toy", cwd=tmp_path)
    assert out.returncode == 0 and "storage/toy/leases/bad.json: damaged lease file" in out.stderr


def test_du_ls_and_log_show_own_and_shared_bytes(tmp_path):
    store, v = three(tmp_path)
    du = json.loads(run("du", "storage", "--json", cwd=tmp_path).stdout)
    stored = sum(m.own_bytes for m in v)  # each file lies in one version's directory
    # shared: the files several versions list (v0's shards 1 and 2, v1's shard 0)
    shared = v[0].shards[1].bytes + v[0].shards[2].bytes + v[1].shards[0].bytes
    toy = du["datasets"]["toy"]
    assert {k: toy[k] for k in ("versions", "own_bytes", "shared_bytes", "stored_bytes")} == {
        "versions": 3,
        "own_bytes": stored - shared,
        "shared_bytes": shared,
        "stored_bytes": stored,
    }
    assert toy["listed_bytes"] == sum(m.bytes for m in v) and du["total"]["stored_bytes"] == stored
    assert run("du", "storage/toy", cwd=tmp_path).stdout.splitlines()[0].split() == [
        "DATASET",
        "VERSIONS",
        "OWN",
        "SHARED",
        "OTHER",
        "ON",
        "DISK",
    ]
    rows = {
        r["version"]: r for r in json.loads(run("ls", "storage", "--json", cwd=tmp_path).stdout)
    }
    assert (
        rows[v[2].version]["shared_bytes"] == v[2].shared_bytes
        and rows[v[0].version]["shared_bytes"] == v[0].bytes - v[0].shards[0].bytes
    )
    log = run("log", "storage/toy", cwd=tmp_path)
    assert log.returncode == 0, log.stderr
    lines = log.stdout.splitlines()
    assert lines[0] == f"version {v[2].version[:12]} (latest)"
    assert lines[2] == "  samples: 10 added, 0 removed, 10 changed, 20 unchanged"
    entries = json.loads(run("log", "storage/toy", "--json", cwd=tmp_path).stdout)
    assert [e["version"] for e in entries] == [m.version for m in reversed(v)]
    assert entries[-1]["parent"] is None and entries[0]["parent_state"] == "present"
    run("tag", f"storage/toy@{v[0].version[:12]}", "first", cwd=tmp_path)
    run("gc", "storage/toy", "--keep-last", "1", cwd=tmp_path)
    lines = run("log", "storage/toy", cwd=tmp_path).stdout.splitlines()
    assert f"parent {v[1].version[:12]} (pruned)" in lines[1]
    assert lines[2] == f"version {v[0].version[:12]} (first, not on latest)"
