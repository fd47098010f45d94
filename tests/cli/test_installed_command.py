"""One smoke test per command through the installed `datapipe` script, as a user runs it: the
console script, its imports and its exit codes in a process of their own. The behaviour of each
command is tested in process elsewhere; `build` runs installed in tests/builder/test_cli.py (on a
terminal) and in tests/reliability (killed, raced), `check` in tests/versioning/test_lineage.py,
`dvc` in tests/versioning/test_dvc.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.cli import datapipe_installed
from sample_data import make_dataset, simple_samples

import datapipe
from datapipe.formats.shards import write_shard


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with the toy dataset, two versions (the older tagged v0)."""
    root = tmp_path_factory.mktemp("installed") / "storage"
    make_dataset(root, sizes=[3, 4])
    datapipe_installed("tag", f"{root}/toy", "v0")
    make_dataset(root)
    return root


def test_version():
    out = datapipe_installed("--version")
    assert out.returncode == 0 and datapipe.__version__ in out.stdout


def test_python_dash_m_datapipe_is_the_same_command():
    out = subprocess.run(
        [sys.executable, "-m", "datapipe", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and datapipe.__version__ in out.stdout


def test_index_and_inspect(tmp_path):
    shard = tmp_path / "s.tar"
    write_shard(shard, simple_samples(12, size=64), index=False)
    out = datapipe_installed("index", str(shard))
    assert out.returncode == 0 and "12 samples" in out.stdout, out.stderr
    out = datapipe_installed("inspect", str(shard), "-n", "1")
    assert out.returncode == 0 and "12 samples, fields: bin, cls" in out.stdout, out.stderr


def test_ls_info_and_verify(store):
    out = datapipe_installed("ls", str(store), "--json")
    assert out.returncode == 0 and {tuple(r["tags"]) for r in json.loads(out.stdout)} == {
        ("v0",),
        ("latest",),
    }
    out = datapipe_installed("info", f"{store}/toy", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["samples"] == 81, out.stderr
    assert datapipe_installed("verify", f"{store}/toy@v0").returncode == 0


def test_tag_diff_and_gc(store, tmp_path):
    assert datapipe_installed("tag", f"{store}/toy", "best").returncode == 0
    out = datapipe_installed("diff", f"{store}/toy@v0", f"{store}/toy@best", "--json")
    assert out.returncode == 0 and len(json.loads(out.stdout)["added"]) == 81 - 7, out.stderr
    out = datapipe_installed("gc", f"{store}/toy")
    assert out.returncode == 0 and out.stdout == "0 removed\n", out.stderr


def test_rejected(store):
    out = datapipe_installed("rejected", f"{store}/toy@v0", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["rows"] == 0, out.stderr
    out = datapipe_installed("rejected", f"{store}/toy", "--failed")
    assert out.returncode == 3 and out.stderr.startswith("error: "), out.stderr


def test_a_user_mistake_is_one_line_and_an_exit_code(tmp_path):
    out = datapipe_installed("info", str(tmp_path / "nowhere/toy"))
    assert (
        out.returncode == 3 and out.stderr.startswith("error: ") and out.stderr.count("\n") == 1
    ), out.stderr
    assert "Traceback" not in out.stderr
