"""DVC tracks a pipeline for real: the dvc CLI in a temporary git repository, `dvc repro`,
push/pull, and `datapipe check` proving a version rebuilds byte for byte (and saying why when it
does not).

The main test runs docs/guide/dvc.md's commands in page order (helpers/doc_pages.py), checking what
DVC and the store show between them, then goes on where the page stops. `dvc repro` runs the
installed `datapipe build` as DVC runs it: in process (the digits are a small source), and forced
once on a cluster of its own, which must give the same version and dvc.lock; `datapipe` commands run
in process (`check` on the session's Dask cluster), saving an interpreter and a cluster start per
call."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.cli import datapipe_in_process, datapipe_installed, on_session_cluster
from helpers.doc_pages import PageRun

REPO = Path(__file__).parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture
def dvc_repo(tmp_path, copy_digits):
    """A git repository with the digits example in pipelines/ (no DVC yet: the page runs `dvc
    init`), and a function that runs a command there."""
    root = tmp_path / "repo"
    copy_digits(root / "pipelines", "digits.yaml", "digits_code.py")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}

    def run(*cmd: str, check: bool = True, **extra_env: str) -> subprocess.CompletedProcess:
        out = subprocess.run(
            cmd, cwd=root, env={**env, **extra_env}, capture_output=True, text=True
        )
        if check and out.returncode != 0:
            raise AssertionError(f"{cmd} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        return out

    run("git", "init", "-q")
    return root, run


def status(run) -> dict:
    return json.loads(run("dvc", "status", "--json").stdout or "{}")


@pytest.mark.slow
def test_dvc_repro_rebuilds_only_on_change_and_check_proves_reproducibility(dvc_repo, dask_client):
    root, run = dvc_repo
    page = PageRun("docs/guide/dvc.md", root, dask_client.scheduler.address)

    page.run_through("datapipe dvc pipelines/digits.yaml")  # after `dvc init -q`
    stage = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]["digits"]
    assert stage["cmd"] == "datapipe build pipelines/digits.yaml --out storage"
    assert stage["deps"] == ["pipelines/digits.yaml", "pipelines/raw", "pipelines/digits_code.py"]
    assert stage["outs"] == [{"storage/digits": {"persist": True}}]
    assert (root / ".dvcignore").read_text().splitlines()[-3:] == [
        "storage/digits/leases/",
        "storage/digits/versions/.partial-*/",
        "storage/digits/versions/*/build-state.npz",
    ]

    assert "Running stage 'digits'" in page.run_through("dvc repro")
    assert status(run) == {}
    # a reader's lease ...
    taken = datapipe_in_process("lease", "storage/digits", "--for", "1d", cwd=root)
    assert taken.returncode == 0, taken.stderr
    assert status(run) == {}  # ... is not a change of the dataset
    first = (root / "storage/digits/refs/latest").read_text().strip()
    lock = (root / "dvc.lock").read_text()

    # nothing changed: DVC skips the stage and the store is not touched (not even the ref rewritten)
    before = store_files(root)
    again = page.run_through("dvc repro")
    assert "Stage 'digits' didn't change, skipping" in again and "Running stage" not in again
    assert store_files(root) == before and (root / "dvc.lock").read_text() == lock

    # a forced rebuild with another worker count changes nothing DVC records
    page.run_through("DATAPIPE_WORKERS=1 dvc repro --force")
    assert (root / "dvc.lock").read_text() == lock

    checked = page.run_through("datapipe check pipelines/digits.yaml")
    assert "reproducible" in checked and first[:12] in checked
    # on a cluster, the rebuild went to a scratch prefix of the store itself, gone after
    assert f"rebuilding into {root / 'storage'}/.check-" in checked
    assert not list((root / "storage").glob(".check-*"))

    # push the dataset to a DVC remote, lose it, pull it back; it verifies
    page.run_through("dvc push -q")
    assert (root.parent / "dvc-remote").is_dir()
    page.run_through("datapipe verify storage/digits")

    # edit one raw row (the page's python block): DVC sees it, check names the input and exits 1
    stale = page.run_through("datapipe check pipelines/digits.yaml")
    assert "lineage: source changed: raw/digits-0.csv" in stale and "content differs" in stale
    assert "samples: 1 changed, 0 only in the recorded version, 0 only in the rebuild" in stale
    # the one field the edited pixels feed, with its sizes
    changed = r"^  sample d0100 \(\w+-\d{6}\.tar\): png \d+ bytes -> \d+ bytes$"
    assert re.search(changed, stale, re.M), stale
    assert "digits" in page.run_through("dvc status")
    page.run_rest()

    # past the page: repro makes a version differing in that sample only
    assert "digits" in status(run)
    rebuilt = run("dvc", "repro")
    assert "Running stage 'digits'" in rebuilt.stdout
    second = (root / "storage/digits/refs/latest").read_text().strip()
    assert second != first and status(run) == {}
    diff = json.loads(
        datapipe_in_process(
            "diff", f"storage/digits@{first}", "storage/digits@latest", "--json", cwd=root
        ).stdout
    )
    assert (diff["changed"], diff["added"], diff["removed"]) == (["d0100"], [], [])
    # persist: older versions stay
    assert (root / f"storage/digits/versions/{first}/manifest.json").exists()

    # tamper with a stored shard: check fails and names it
    shard = sorted((root / "storage/digits/versions" / second).glob("*.tar"))[1]
    data = bytearray(shard.read_bytes())
    data[700] ^= 0xFF
    shard.write_bytes(bytes(data))
    tampered = datapipe_in_process(
        "check",
        "pipelines/digits.yaml",
        *on_session_cluster(dask_client.scheduler.address),
        cwd=root,
    )
    assert tampered.returncode == 1 and f"mismatch: {shard}" in tampered.stdout.replace(
        "stored ", ""
    )


def store_files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file of the store (refs included) with its size and modification time."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted((root / "storage").rglob("*"))
        if p.is_file()
    }


def test_dvc_outside_a_repository_is_a_clear_error(tmp_path):
    shutil.copy(REPO / "pipelines" / "digits.yaml", tmp_path / "digits.yaml")
    out = datapipe_installed("dvc", "digits.yaml", cwd=tmp_path)  # the `dvc` smoke test
    assert (
        out.returncode == 3
        and "not inside a DVC repository" in out.stderr
        and "Traceback" not in out.stderr
    )
