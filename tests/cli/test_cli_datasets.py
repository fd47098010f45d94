"""`datapipe info|verify|gc|diff` on damaged and edited stores: one line, no traceback. In process
(the command's code, exit codes and output); the installed command runs the malformed-manifest case
and test_installed_command.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner
from helpers.cli import datapipe_in_process, datapipe_installed
from sample_data import make_dataset

from datapipe.cli.main import cli
from datapipe.versioning.store import Store

SCHEMA = jsonschema.Draft202012Validator(
    json.loads((Path(__file__).parents[2] / "schemas" / "manifest.schema.json").read_text())
)


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return datapipe_in_process(*args, cwd=cwd)


def manifest_path(url: str) -> Path:
    root, name = url.rsplit("/", 1)
    store = Store(root)
    return Path(store.path(name, "versions", store.resolve(name), "manifest.json"))


def edit(path: Path, change) -> None:
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw))


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def change(raw):
        for key in keys[:-1]:
            raw = raw[key]
        raw[keys[-1]] = value

    return change


def _drop(*keys):
    def change(raw):
        for key in keys[:-1]:
            raw = raw[key]
        del raw[keys[-1]]

    return change


@pytest.mark.broken_manifests
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_set("shards", "abc"), "field 'shards': expected a list, got str \"abc\""),
        (_drop("fields"), "field 'fields': missing"),
        (_set("fields", ["bin"]), "field 'fields': expected an object"),
        (
            _set("shards", 0, "samples", "7"),
            "field 'shards[0].samples': expected a non-negative integer, got str",
        ),
        (_drop("shards", 1, "sha256"), "field 'shards[1].sha256': missing"),
        (
            _set("shards", 0, "sha256", "abc"),
            "field 'shards[0].sha256': expected 64 lowercase hex digits",
        ),
        (
            _set("shards", 0, "path", "../../../etc/passwd"),
            "field 'shards[0].path': expected a file name",
        ),
        (_set("shards", 2, None), "field 'shards[2]': expected an object, got NoneType null"),
        (
            _set("stages", [{"stage": "read", "rows_in": -1, "rows_out": 0}]),
            "field 'stages[0].rows_in'",
        ),
        (_set("lineage", "none"), "field 'lineage': expected an object"),
        (_set("lineage", "code", [{"module": "m"}]), "field 'lineage.code[0].sha256': missing"),
        (_set("lineage", "seed", "42"), "field 'lineage.seed': expected an integer"),
        (_set("parent", 5), "field 'parent': expected a string"),
        (_set("colour", "blue"), "field 'colour': not a manifest field"),
        (_set("samples", 3), "field 'samples' is 3 but the shards add up to 81"),
        (_set("rejected_rows", 4), "field 'rejected' is None but 'rejected_rows' is 4"),
    ],
)
def test_a_malformed_manifest_is_one_error_naming_the_file_and_field(tmp_path, change, message):
    url = make_dataset(tmp_path / "store")
    path = manifest_path(url)
    edit(path, change)
    # the schema refuses the same manifests (all but the two consistency rules it cannot express)
    schema_errors = list(SCHEMA.iter_errors(json.loads(path.read_text())))
    assert bool(schema_errors) != ("add up to" in message or "'rejected_rows' is" in message), (
        schema_errors
    )
    for command in ("info", "verify", "ls"):
        # in process (the command as `datapipe` runs it, without starting 48 interpreters); one case
        # runs for real
        out = CliRunner().invoke(
            cli, [command, url if command != "ls" else str(tmp_path / "store")]
        )
        assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
        assert out.exit_code == 6, (command, out.exit_code, out.stderr)
        assert out.stderr.startswith(f"error: {path}: malformed manifest: "), out.stderr
        assert message in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1


@pytest.mark.broken_manifests
def test_a_malformed_manifest_through_the_installed_command(tmp_path):
    url = make_dataset(tmp_path / "store")
    path = manifest_path(url)
    edit(path, _set("shards", "abc"))
    for command in ("info", "verify"):
        out = datapipe_installed(command, url)
        assert out.returncode == 6 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr == (
            f"error: {path}: malformed manifest: field 'shards': expected a list, got str \"abc\"; "
            "the file was edited or damaged (restore it from a copy, or delete its version "
            "directory and build again)\n"
        )


@pytest.mark.broken_manifests
@pytest.mark.parametrize("content", [b"", b"{not json", b"[1, 2]", b"\xff\xfe"])
def test_a_manifest_that_is_not_a_json_object_is_a_clear_error(tmp_path, content):
    url = make_dataset(tmp_path / "store")
    path = manifest_path(url)
    path.write_bytes(content)
    out = run("verify", url)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"error: {path}: not a valid manifest")


@pytest.mark.broken_manifests
def test_verify_catches_a_manifest_edited_to_look_consistent(tmp_path):
    """The files still match the edited manifest, but it no longer hashes to its version id."""
    url = make_dataset(tmp_path / "store")
    path = manifest_path(url)
    assert run("verify", url).returncode == 0
    edit(path, _set("fields", "cls", "bytes"))
    out = run("verify", url)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    version = path.parent.name
    assert f"mismatch: {path} (its content hashes to " in out.stdout
    assert f"not to the version id {version}; the manifest was edited)" in out.stdout
    assert out.stderr == f"error: toy@{version[:12]}: 1 problem(s)\n"


@pytest.mark.broken_manifests
def test_verify_catches_a_manifest_moved_under_another_version_id(tmp_path):
    url = make_dataset(tmp_path / "store")
    path = manifest_path(url)
    edit(path, _set("version", "0" * 64))
    out = run("verify", url)
    assert out.returncode == 1
    assert (
        f"mismatch: {path} (names version {'0' * 64}, but lies in {path.parent.name})" in out.stdout
    )
    assert "missing:" not in out.stdout  # the shards beside it are still checked, and match


def test_verify_reports_a_missing_rejected_file(tmp_path):
    store = Store(str(tmp_path / "store"))
    from datapipe.formats.registry import get_format
    from datapipe.versioning.manifest import Manifest, StageCounts

    writer = store.begin("toy")
    shard = writer.write_shard(0, [{"__key__": "a", "cls": b"1"}], get_format("webdataset"))
    writer.store.fs.pipe_file(f"{writer.partial}/rejected.parquet", b"PAR1 rows PAR1")
    m = writer.commit(
        Manifest(
            name="toy",
            shard_format="webdataset",
            fields={"cls": "bytes"},
            shards=(shard,),
            stages=(StageCounts("validate", 3, 1, 0, 2),),
            rejected="rejected.parquet",
            rejected_rows=2,
        )
    )
    version_dir = tmp_path / "store/toy/versions" / m.version
    out = run("verify", str(tmp_path / "store/toy"))
    assert out.returncode == 0 and "rejected.parquet present" in out.stdout, out.stdout + out.stderr
    (version_dir / "rejected.parquet").unlink()
    out = run("verify", str(tmp_path / "store/toy"))
    assert out.returncode == 1
    assert out.stdout == (
        f"missing: {version_dir}/rejected.parquet (the manifest records 2 rejected rows in it)\n"
    )


def test_gc_without_a_dataset_or_with_a_misspelled_one_lists_the_datasets(tmp_path):
    make_dataset(tmp_path / "storage", name="toy")
    make_dataset(tmp_path / "storage", name="digits")
    out = run("gc", "storage", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr == (
        "error: storage is a store, not a dataset: gc cleans one dataset at a time; name one of "
        "storage/digits, storage/toy\n"
    )
    out = run("gc", "storage/toys", "--prune", cwd=tmp_path)
    assert out.returncode == 3 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr == (
        "error: storage: no dataset 'toys'; did you mean 'toy'? (datasets here: digits, toy); "
        "give STORE/NAME\n"
    )
    out = run("gc", "storage/toy@latest", cwd=tmp_path)
    assert out.returncode == 2 and "without @REF" in out.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    out = run("gc", "storage/toy", cwd=empty)
    assert out.returncode == 3 and out.stderr == (
        f"error: storage: no such store: the folder {empty / 'storage'} does not exist; give the "
        "store the build wrote to (build --out, default storage)\n"
    )


def test_gc_prune_from_the_cli(tmp_path):
    store = Store(str(tmp_path / "storage"))
    make_dataset(tmp_path / "storage", sizes=[3, 4])
    old = store.resolve("toy")
    make_dataset(tmp_path / "storage", sizes=[5])
    new = store.resolve("toy")
    store.set_ref("toy", "keep", old)
    make_dataset(tmp_path / "storage", sizes=[2, 2])
    newest = store.resolve("toy")
    assert set(store.versions("toy")) == {old, new, newest}
    out = run("gc", "storage/toy", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == "0 removed\n"
    assert set(store.versions("toy")) == {old, new, newest}  # never by default
    out = run("gc", "storage/toy", "--prune", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == sorted([f"keep {old[:12]} (tag keep)", f"keep {newest[:12]} (latest)"])
    assert lines[2].startswith(f"delete version {new[:12]}: 2 files, ")  # a shard and its index
    assert lines[3] == f"removed {store.path('toy', 'versions', new)}"
    assert lines[4].startswith("1 removed, ") and lines[4].endswith(" freed") and len(lines) == 5
    assert set(store.versions("toy")) == {old, newest}  # tagged and latest stay
    assert run("verify", "storage/toy@keep", cwd=tmp_path).returncode == 0


def commit_samples(root: Path, samples: list[dict], tag: str | None = None) -> str:
    from datapipe.formats.registry import get_format
    from datapipe.versioning.manifest import Manifest

    store = Store(str(root))
    writer = store.begin("toy")
    shards = (
        writer.write_shard(0, samples[:3], get_format("webdataset")),
        writer.write_shard(1, samples[3:], get_format("webdataset")),
    )
    m = writer.commit(
        Manifest(name="toy", shard_format="webdataset", fields={"cls": "bytes"}, shards=shards),
        ("latest", tag) if tag else ("latest",),
    )
    return m.version


def test_diff_prints_added_removed_and_changed_keys(tmp_path):
    old = [{"__key__": f"k{i}", "cls": str(i).encode()} for i in range(6)]
    new = [dict(s) for s in old if s["__key__"] != "k1"]  # k1 removed
    new[2] = {"__key__": "k3", "cls": b"33"}  # k3 changed
    new.append({"__key__": "k9", "cls": b"9"})  # k9 added
    a = commit_samples(tmp_path / "storage", old, tag="v1")
    b = commit_samples(tmp_path / "storage", new)
    out = run("diff", "storage/toy@v1", "storage/toy", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"toy@{a[:12]} -> toy@{b[:12]}: 1 added, 1 removed, 1 changed, 4 unchanged",
        "+ k9",
        "- k1",
        "~ k3",
    ]
    same = run("diff", "storage/toy", f"storage/toy@{b[:8]}", cwd=tmp_path)
    assert (
        same.stdout == f"toy@{b[:12]} -> toy@{b[:12]}: 0 added, 0 removed, 0 changed, 6 unchanged\n"
    )
