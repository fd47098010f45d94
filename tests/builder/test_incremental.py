"""Incremental builds: a changed source re-measures only its changed partitions and reuses the
parent's shards whose samples did not change; the version is exactly the one a build from scratch
gives."""

import os
import re

import pytest

from datapipe.builder.result import PartitionCounts, SourceFileCounts
from datapipe.versioning.store import Store

PIPELINE = """\
    name: rows
    source: {path: raw/*.csv, format: csv}
    sample: {key: id, fields: {cls: label, txt: text}}
    shards: {max_bytes: 20KB%s}
    """


def write_file(project, n: int, rows: int = 120, salt: str = "") -> None:
    lines = ["id,label,text"] + [
        f"f{n:03d}r{i:04d},{i % 10},{salt}{'x' * (40 + (n * 7 + i) % 90)}" for i in range(rows)
    ]
    project.write(f"raw/f{n:03d}.csv", "\n".join(lines) + "\n")


def fresh(project, tmp_path, name: str):
    """The same pipeline and raw files built into an empty store."""
    from datapipe.builder.config import load_pipeline
    from datapipe.builder.run import build

    return build(load_pipeline(project.root / "pipeline.yaml"), Store(str(tmp_path / name)))


@pytest.mark.parametrize("change", ["added", "edited", "removed"])
def test_a_rebuild_reuses_what_did_not_change_and_gives_the_fresh_version(
    project, tmp_path, change
):
    project.pipeline(PIPELINE % "")
    for n in range(0, 20, 2):
        write_file(project, n)
    first = project.build()
    assert first.incremental.full_because == "no earlier version"
    if change == "added":
        write_file(project, 9)  # in the middle of the source order
    elif change == "edited":
        write_file(project, 10, salt="new")
    else:
        os.remove(project.root / "raw/f010.csv")
    again = project.build()
    scratch = fresh(project, tmp_path, "scratch")
    assert again.manifest.version == scratch.manifest.version
    assert project.samples(again) == project.samples(
        scratch.manifest, Store(str(tmp_path / "scratch"))
    )
    inc = again.incremental
    assert inc.parent == first.manifest.version and inc.full_because is None
    assert inc.partitions.measured == (0 if change == "removed" else 1)
    # written: the changed file's samples (2 tar members of at most 1 KiB each) and the shards on
    # either side
    changed_bytes = 0 if change == "removed" else 120 * 2048
    assert inc.shards.bytes_written <= changed_bytes + 4 * 20_000
    assert inc.shards.reused + inc.shards.written == len(again.manifest.shards)
    assert inc.shards.reused > 0.8 * len(again.manifest.shards)
    directory = project.store.path("rows", "versions", again.manifest.version)
    # the parent's file, linked
    assert os.stat(f"{directory}/{again.manifest.shards[0].path}").st_nlink == 2
    from datapipe.versioning.verify import verify_version

    assert not verify_version(project.store, "rows", again.manifest, again.manifest.version)


def test_a_shuffled_build_rewrites_every_shard_and_is_still_exact(project, tmp_path):
    project.pipeline(PIPELINE % ", shuffle_seed: 3")
    for n in range(6):
        write_file(project, n)
    project.build()
    write_file(project, 99)
    again = project.build()
    assert again.manifest.version == fresh(project, tmp_path, "scratch").manifest.version
    assert again.incremental.partitions.reused == 6 and again.incremental.shards.reused == 0


def test_a_changed_pipeline_builds_in_full_and_says_why(project):
    project.pipeline(PIPELINE % "")
    for n in range(4):
        write_file(project, n)
    project.build()
    project.pipeline(PIPELINE % ", max_samples: 50")
    again = project.build()
    assert again.incremental.full_because == "the pipeline, its code or the source's schema changed"
    assert again.incremental.partitions == PartitionCounts(measured=4, reused=0)


def test_a_damaged_build_state_means_a_full_build(project):
    project.pipeline(PIPELINE % "")
    for n in range(3):
        write_file(project, n)
    first = project.build()
    state = project.store.path("rows", "versions", first.manifest.version, "build-state.npz")
    with open(state, "wb") as f:
        f.write(b"not a state")
    write_file(project, 5)
    again = project.build()
    assert again.incremental.full_because == "the parent has no readable build state"


def test_du_counts_a_linked_shard_once(project):
    from datapipe.versioning.history import usage

    project.pipeline(PIPELINE % "")
    for n in range(4):
        write_file(project, n)
    first = project.build()
    write_file(project, 9)
    again = project.build()
    u = usage(project.store, "rows")
    reused = sum(s.bytes for s in again.manifest.shards) - again.incremental.shards.bytes_written
    assert u["stored_bytes"] == first.manifest.bytes + again.manifest.bytes - reused


def test_a_file_edited_in_place_with_its_size_and_mtime_kept_is_read_again(
    project, tmp_path, monkeypatch
):
    from datapipe.builder import known_hashes

    monkeypatch.setattr(known_hashes, "RACY_NS", 0)  # files written a moment ago count as settled
    project.pipeline(PIPELINE % "")
    for n in range(6):
        write_file(project, n)
    project.build()
    path = project.root / "raw/f003.csv"
    before = os.stat(path)
    text = path.read_text()
    path.write_text(text.replace("f003r0001,1,", "f003r0001,7,"))  # same size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the same mtime
    again = project.build()
    # its ctime moved
    assert again.incremental.source_files == SourceFileCounts(hashed=1, trusted=5)
    assert again.incremental.partitions.measured == 1
    assert again.manifest.version == fresh(project, tmp_path, "scratch").manifest.version
    same = project.build()  # nothing changed since: no file is read for its hash
    assert same.incremental.source_files == SourceFileCounts(hashed=0, trusted=6)
    assert same.manifest.version == again.manifest.version


def test_files_changed_just_before_their_hash_are_hashed_again(project):
    project.pipeline(PIPELINE % "")
    for n in range(3):
        write_file(project, n)
    project.build()
    again = project.build()  # the files changed within RACY_NS of the first build's listing
    assert again.incremental.source_files == SourceFileCounts(hashed=3, trusted=0)


def test_a_small_rebuild_runs_in_process_even_with_workers(project, tmp_path):
    project.pipeline(PIPELINE % "")
    for n in range(4):
        write_file(project, n)
    project.build()
    write_file(project, 9)
    again = project.build(workers=2)
    assert again.ran_on == "in-process" and again.incremental.partitions.measured == 1
    assert again.manifest.version == fresh(project, tmp_path, "scratch").manifest.version


def test_a_shards_digest_follows_its_samples_not_the_partition_numbers():
    import numpy as np

    from datapipe.builder.incremental import shard_digests

    ids = ["aa" * 16, "bb" * 16, "cc" * 16]
    keep = [np.ones(4, bool), np.ones(3, bool), np.ones(2, bool)]
    pos = [np.arange(4), np.arange(4, 7), np.arange(7, 9)]
    dest = [np.array([0, 0, 0, 1]), np.array([1, 1, 1]), np.array([2, 2])]
    digests = shard_digests(ids, keep, pos, dest, 3)
    assert len(set(digests)) == 3
    # the same samples, with a new partition in front: the shards keep their digests
    moved = shard_digests(
        ["dd" * 16, *ids],
        [np.ones(1, bool), *keep],
        [np.arange(1), *(p + 1 for p in pos)],
        [np.array([0]), *(d + 1 for d in dest)],
        4,
    )
    assert moved[1:] == digests
    # a dropped row, or the same rows in another order, is another digest for that shard only
    keep2 = [np.array([True, False, True, True]), keep[1], keep[2]]
    dropped = shard_digests(
        ids,
        keep2,
        [np.arange(3), np.arange(3, 6), np.arange(6, 8)],
        [np.array([0, 0, 1]), np.array([1, 1, 1]), np.array([2, 2])],
        3,
    )
    assert dropped[0] != digests[0] and dropped[2] == digests[2]
    swapped = shard_digests(ids, keep, [pos[0], np.array([5, 4, 6]), pos[2]], dest, 3)
    assert swapped[1] != digests[1] and swapped[0] == digests[0] and swapped[2] == digests[2]


def test_a_parent_state_of_another_format_means_a_full_build(project, monkeypatch):
    from datapipe.builder import incremental

    project.pipeline(PIPELINE % "")
    for n in range(3):
        write_file(project, n)
    project.build()
    monkeypatch.setattr(incremental, "STATE_FORMAT", incremental.STATE_FORMAT + 1)
    write_file(project, 5)
    again = project.build()
    assert again.incremental.full_because.startswith("the parent's build state is of format")


def test_a_diff_reads_only_the_shards_two_versions_do_not_share(project, monkeypatch):
    from datapipe.versioning import sample_diff
    from datapipe.versioning.sample_diff import Side, VersionPair, diff_versions, sample_hashes

    project.pipeline(PIPELINE % "")
    for n in range(0, 20, 2):
        write_file(project, n)
    first = project.build()
    write_file(project, 9)
    write_file(project, 4, salt="new")  # every row of one file changed, in place
    os.remove(project.root / "raw/f016.csv")
    again = project.build()
    a, b = (Side(project.store, "rows", r.manifest) for r in (first, again))
    whole = diff_versions(*(sample_hashes(s.store, s.name, s.manifest) for s in (a, b)))
    read = []
    real = sample_diff.ShardIndex.from_bytes
    monkeypatch.setattr(
        sample_diff.ShardIndex,
        "from_bytes",
        lambda data, path: read.append(path) or real(data, path),
    )
    pair = VersionPair(a, b)
    d = pair.diff()
    assert (d.added, d.removed, d.changed, d.unchanged) == (
        whole.added,
        whole.removed,
        whole.changed,
        whole.unchanged,
    )
    assert len(d.added) == 120 and len(d.removed) == 120 and len(d.changed) == 120
    shards = len(first.manifest.shards) + len(again.manifest.shards)
    assert len(read) == len(pair.only_a) + len(pair.only_b) < shards / 3


DEDUPED = """\
    name: rows
    source: {path: raw/*.csv, format: csv}
    stages:
      - dedupe: {columns: [text]}
    sample: {key: id, fields: {cls: label, txt: text}}
    shards: {max_bytes: 20KB}
    """


def write_texts(project, n: int, texts: list[str]) -> None:
    lines = ["id,label,text"] + [f"f{n:03d}r{i:04d},{i % 10},{t}" for i, t in enumerate(texts)]
    project.write(f"raw/f{n:03d}.csv", "\n".join(lines) + "\n")


@pytest.mark.parametrize("change", ["added", "duplicating", "removed"])
def test_a_dedupe_pipeline_rebuilds_incrementally_and_exactly(project, tmp_path, change):
    project.pipeline(DEDUPED)
    for n in range(0, 16, 2):
        write_texts(project, n, [f"t{n}-{i}-{'y' * (30 + i % 50)}" for i in range(100)])
    # repeats rows of f012
    write_texts(
        project,
        14,
        [f"t12-{i}-{'y' * (30 + i % 50)}" for i in range(50)] + [f"t14-{i}" for i in range(50)],
    )
    first = project.build()
    if change == "added":
        write_texts(project, 7, [f"t7-{i}" for i in range(100)])
    # new rows that repeat those of a later file: that file's rows drop now
    elif change == "duplicating":
        write_texts(project, 9, [f"t10-{i}-{'y' * (30 + i % 50)}" for i in range(40)])
    else:  # the file whose rows f014 repeated: f014's rows are first occurrences now
        os.remove(project.root / "raw/f012.csv")
    again = project.build()
    scratch = fresh(project, tmp_path, "scratch")
    assert again.manifest.version == scratch.manifest.version
    assert [s.dropped for s in again.manifest.stages] == [
        s.dropped for s in scratch.manifest.stages
    ]
    inc = again.incremental
    assert inc.parent == first.manifest.version and inc.full_because is None
    # the new file, and one whose mask changed
    remeasured = {"added": 1, "duplicating": 2, "removed": 1}[change]
    assert inc.partitions.measured == remeasured
    assert inc.shards.reused > 0.6 * len(again.manifest.shards)


def test_a_missing_latest_version_means_a_full_build_that_says_so(project, tmp_path):
    import shutil

    project.pipeline(PIPELINE % "")
    for n in range(3):
        write_file(project, n)
    first = project.build()
    shutil.rmtree(project.store.path("rows", "versions", first.manifest.version))
    write_file(project, 5)
    again = project.build()
    assert again.incremental.full_because == (
        f"the latest version, {first.manifest.version[:12]}, is missing from "
        "the store (deleted or pruned)"
    )
    assert again.manifest.version == fresh(project, tmp_path, "scratch").manifest.version


def test_a_rebuild_partitions_at_the_blocksize_the_pipeline_asks_for(project, tmp_path):
    sized = PIPELINE.replace("format: csv}", "format: csv, options: {blocksize: %s}}")
    project.pipeline(sized % ("1MB", ""))
    for n in range(4):
        write_file(project, n)
    first = project.build()
    # a file each
    assert first.incremental.partitions.measured + first.incremental.partitions.reused == 4
    project.pipeline(sized % ("4KB", ""))
    # the parent's 1 MB partitions must not stand in for the 4 KB ones asked for
    again = project.build()
    parts = again.incremental.partitions
    assert parts.reused == 0 and parts.measured > 8
    assert again.manifest.version == first.manifest.version
    write_file(project, 9)
    third = project.build()  # same blocksize as its parent: only the new file's partitions are read
    assert third.incremental.partitions.reused == parts.measured, third.incremental
    assert third.manifest.version == fresh(project, tmp_path, "scratch").manifest.version


def test_a_diff_per_split_from_the_unshared_shards_is_the_whole_diff(project):
    from datapipe.versioning.sample_diff import Side, VersionPair, diff_versions, sample_hashes

    split = PIPELINE.replace(
        "shards: {max_bytes: 20KB%s}",
        "shards: {max_bytes: 20KB}\n    splits: {fractions: {train: 0.7, val: 0.3}, by: id}",
    )
    project.pipeline(split)
    for n in range(0, 12, 2):
        write_file(project, n)
    first = project.build()
    write_file(project, 5)
    write_file(project, 8, salt="new")
    second = project.build()
    assert second.incremental.shards.reused > 0
    a, b = (Side(project.store, "rows", r.manifest) for r in (first, second))
    pair = VersionPair(a, b)
    for name, d in pair.splits().items():
        whole = diff_versions(*(sample_hashes(s.store, s.name, s.manifest, name) for s in (a, b)))
        assert (d.added, d.removed, d.changed, d.unchanged) == (
            whole.added,
            whole.removed,
            whole.changed,
            whole.unchanged,
        ), name
    assert sorted(pair.splits()) == ["train", "val"] and pair.splits()["train"].added


def test_rehash_reads_every_file_for_its_hash(project, monkeypatch):
    import json

    from helpers.cli import datapipe_in_process

    from datapipe.builder import known_hashes

    monkeypatch.setattr(known_hashes, "RACY_NS", 0)
    project.pipeline(PIPELINE % "")
    for n in range(3):
        write_file(project, n)
    project.build()
    assert project.build().incremental.source_files == SourceFileCounts(hashed=0, trusted=3)
    out = datapipe_in_process(
        "build", "pipeline.yaml", "--out", "store", "--rehash", "--json", cwd=project.root
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["incremental"]["source_files"] == {
        "hashed": 3,
        "trusted": 0,
    }


def test_the_text_summary_says_what_came_from_the_parent(project):
    from helpers.cli import datapipe_in_process

    project.pipeline(PIPELINE % "")
    for n in range(0, 8, 2):
        write_file(project, n)
    first = datapipe_in_process("build", "pipeline.yaml", "--out", "store", cwd=project.root)
    assert first.returncode == 0 and "full build: no earlier version" in first.stdout
    write_file(project, 3)
    again = datapipe_in_process("build", "pipeline.yaml", "--out", "store", cwd=project.root)
    line = next(x for x in again.stdout.splitlines() if x.startswith("incremental from "))
    assert re.search(
        r"partitions 1 measured, 4 reused; shards \d+ written \(.+\), \d+ reused; source files \d+ "
        r"hashed, \d+ unchanged$",
        line,
    ), line


def test_a_state_keeps_every_reject_but_not_its_data(tmp_path):
    import io
    import json

    import numpy as np

    from datapipe.builder.incremental import BuildState, load_state, save_state
    from datapipe.builder.passes import Measured
    from datapipe.builder.quarantine import Reject

    rejects = [[Reject("stages[0].near_dedupe", f"why {i}", i, None) for i in range(4)], []]
    measured = [
        Measured([], r[:1], np.zeros(2, np.int64), np.zeros(2, np.uint64), {}, None, None, [], None)
        for r in rejects
    ]
    keep = [np.ones(2, bool), np.ones(2, bool)]
    state = BuildState("key", ["a", "b"], measured, rejects, keep, ["d"])
    saved = bytes(save_state(state))
    again = load_state(saved)
    assert again.rejects == rejects
    assert [m.rejects for m in again.measured] == [rejects[0][:1], []]
    with np.load(io.BytesIO(saved)) as z:
        assert not [k for k in z.files if k.startswith("reject")]

    # a state written before format 5 kept the data in its JSON document: read, the data left out
    with np.load(io.BytesIO(saved)) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["meta"].tobytes())
    meta["measured"][0]["rejects"][0]["data"] = '{"text": "old"}'
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    old = io.BytesIO()
    np.savez(old, **arrays)
    assert load_state(old.getvalue()).rejects == rejects


REJECTING = """\
    name: rows
    source: {path: raw/*.csv, format: csv}
    stages:
      - validate: {label: {max: 5}}
    sample: {key: id, fields: {cls: label, txt: text}}
    shards: {max_bytes: 20KB}
    max_rejected: 0.5
    """
ODD_TEXTS = ["café ✓", "emoji 🙂", "plain", "日本語のテキスト"]


def write_rejecting(project, n: int, rows: int = 60) -> None:
    """A CSV file whose rows of label over 5 the validate stage rejects, some of their texts odd;
    and two rows with a key of file 0, rejected as duplicates after it (file 5: and one with a key
    of file 8, whose row becomes a duplicate)."""
    keys = [f"f{n:03d}r{i:03d}" for i in range(rows)]
    if n:
        keys[1], keys[2] = "f000r001", "f000r007"
    if n == 5:  # a key of a later file: that file's row becomes a duplicate
        keys[3] = "f008r010"
    rows_of = [f"{k},{i % 9},{ODD_TEXTS[i % 4]} {n} {i}" for i, k in enumerate(keys)]
    lines = ["id,label,text", *rows_of]
    project.write(f"raw/f{n:03d}.csv", "\n".join(lines) + "\n")


def rejected_rows(store, result):
    """The quarantine of a build's version, its rows with their data read back."""
    import json

    from datapipe.versioning.rejected import read_rows, version_quarantine

    rows = read_rows(store, version_quarantine(store, "rows", result.manifest))
    return [{**r, "data": json.loads(r["data"])} for r in rows]


@pytest.mark.parametrize("on", ["in process", "cluster, encoded kept", "cluster"])
def test_a_rebuilds_rejects_keep_their_data_from_the_parents_quarantine(
    project, tmp_path, request, on
):
    client = request.getfixturevalue("dask_client") if on != "in process" else None
    kept = {"in process": None, "cluster, encoded kept": True, "cluster": False}[on]
    project.pipeline(REJECTING)
    for n in range(0, 12, 2):
        write_rejecting(project, n)
    first = project.build(client=client, keep_encoded=kept)
    write_rejecting(project, 5)  # in the middle of the source order
    again = project.build(client=client, keep_encoded=kept)
    # data from the parent's quarantine: of five files' rejects, and of file 8's before its new
    # duplicate (found on a worker), whose report carries over
    assert again.incremental.full_because is None and again.incremental.partitions.measured == 1
    scratch = fresh(project, tmp_path, "scratch")
    assert again.manifest.version == scratch.manifest.version
    rows = rejected_rows(project.store, again)
    assert rows == rejected_rows(Store(str(tmp_path / "scratch")), scratch)
    stages = {r["stage"] for r in rows}
    assert stages == {"stages[0].validate", "sample"}
    assert len(rows) == sum(s.rejected for s in again.manifest.stages)
    # the rows of the files the rebuild did not read, their data whole from the parent's quarantine
    texts = {r["data"]["text"] for r in rows if r["source"].endswith("f002.csv")}
    assert "日本語のテキスト 2 7" in texts
    # the files the tasks left the data in went with the partial version
    versions = project.root / "store" / "rows" / "versions"
    assert not list(versions.glob("*/rejects")) and not list(versions.glob(".partial-*"))
    new_duplicate = [r for r in rows if r["reason"].startswith("duplicate sample key 'f008r010'")]
    assert [r["source"] for r in new_duplicate] == ["raw/f008.csv"]
    before = [r for r in rows if "f005" not in r["source"] and "f008r010" not in r["reason"]]
    assert rejected_rows(project.store, first) == before


def test_a_parent_without_its_quarantine_means_a_full_build(project, tmp_path):
    project.pipeline(REJECTING)
    for n in range(0, 6, 2):
        write_rejecting(project, n)
    first = project.build()
    os.remove(project.store.path("rows", "versions", first.manifest.version, "rejected.parquet"))
    write_rejecting(project, 1)
    again = project.build()
    assert "quarantine" in again.incremental.full_because
    assert again.incremental.partitions.measured == 4
    scratch = fresh(project, tmp_path, "scratch")
    assert rejected_rows(project.store, again) == rejected_rows(
        Store(str(tmp_path / "scratch")), scratch
    )
