"""`datapipe inspect` and `index`, in process (test_installed_command.py runs them, and --version,
installed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import datapipe_in_process
from sample_data import simple_samples

from datapipe.formats.shards import index_path, write_shard


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return datapipe_in_process(*args, cwd=cwd)


@pytest.mark.parametrize("ext", [".tar", ".tfrecord"])
def test_index_then_inspect(tmp_path, ext):
    shard = tmp_path / f"s{ext}"
    write_shard(shard, simple_samples(12, size=64), index=False)
    out = run("inspect", str(shard), "--n", "2")
    assert out.returncode == 0, out.stderr
    assert (
        "no index" in out.stdout
        and "sample000001" in out.stdout
        and "sample000002" not in out.stdout
    )
    out = run("index", str(shard))
    assert out.returncode == 0 and "12 samples" in out.stdout
    assert index_path(shard).exists()
    out = run("inspect", str(shard), "-n", "1")
    assert "12 samples, fields: bin, cls" in out.stdout
    assert "bin: 64 B" in out.stdout and "cls: 1 B '0'" in out.stdout


def test_index_and_inspect_a_token_shard(tmp_path):
    """A token shard's NAME.bin.idx is rebuilt from its Megatron index and documents table."""
    shard = tmp_path / "shard-000000.bin"
    docs = [{"__key__": f"d{i}", "tokens": np.arange(i + 1, dtype=np.uint16)} for i in range(7)]
    write_shard(shard, docs, "tokens")
    written = index_path(shard).read_bytes()
    index_path(shard).unlink()
    out = run("index", str(shard))
    assert out.returncode == 0 and "7 samples" in out.stdout
    assert index_path(shard).read_bytes() == written
    out = run("inspect", str(shard), "-n", "2")
    assert "7 samples, fields: tokens" in out.stdout and "tokens: uint16[2] [0, 1]" in out.stdout
    (tmp_path / "shard-000000.idx").unlink()
    out = run("inspect", str(shard))
    assert out.returncode == 3 and "shard-000000.idx: no such file" in out.stderr


@pytest.mark.parametrize(
    ("setup", "args", "code", "message"),
    [
        (None, ["inspect", "missing.tar"], 3, "missing.tar: no such file"),
        ("garbage", ["inspect", "bad.tar"], 4, "bad.tar at byte 0: bad tar header"),
        ("garbage", ["index", "bad.tar"], 4, "bad.tar at byte 0"),
        (None, ["index", "data.csv"], 2, "cannot tell the shard format"),
        ("truncated", ["inspect", "t.tfrecord"], 4, "index describes"),
    ],
)
def test_user_mistakes_get_one_line_and_an_exit_code(tmp_path, setup, args, code, message):
    if setup == "garbage":
        (tmp_path / "bad.tar").write_bytes(b"not a tar" * 100)
    if setup == "truncated":
        write_shard(tmp_path / "t.tfrecord", simple_samples(5))
        data = (tmp_path / "t.tfrecord").read_bytes()
        (tmp_path / "t.tfrecord").write_bytes(data[:-10])
    out = run(*args, cwd=tmp_path)
    assert out.returncode == code, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("error: ") and message in out.stderr
