"""A build on a real `dask scheduler` with two `dask worker` processes gives the same version as the
local build."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.cli import datapipe_in_process

REPO = Path(__file__).parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture
def dask_cluster(tmp_path):
    """`dask scheduler` and `dask worker --nworkers 2` on 127.0.0.1; yields the scheduler
    address."""
    scheduler_file = tmp_path / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    common = ["--no-dashboard"]
    # both at once: the worker command waits for the scheduler file to appear
    procs = [
        subprocess.Popen(
            [str(BIN / "dask"), *command, "--scheduler-file", str(scheduler_file), *common],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for command in (
            ["scheduler", "--host", "127.0.0.1", "--port", "0"],
            ["worker", "--nworkers", "2", "--nthreads", "1", "--host", "127.0.0.1"],
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        from distributed import Client

        with Client(address, timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
        yield address
        # the scheduler closes itself and its workers, and both commands exit, in ~3 s; SIGTERM
        # alone often leaves `dask worker` winding down for ~8 s
        with Client(address, timeout="30s") as client:
            client.shutdown()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=30)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait(timeout=30)


@pytest.mark.distributed
def test_scheduler_build_matches_local_build(tmp_path, dask_cluster, copy_digits, digits_built):
    copy_digits(tmp_path, "digits.yaml", "digits_code.py")
    # in this process (the installed command's own start is tests/cli/test_installed_command.py's):
    # the client and the build are this process's, the tasks run in the `dask worker` processes
    out = datapipe_in_process(
        "build",
        "digits.yaml",
        "--json",
        "--out",
        "remote",
        "--scheduler",
        dask_cluster,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    remote = json.loads(out.stdout.strip().splitlines()[-1])
    # the local build: the session's digits build (a LocalCluster in this process)
    local = digits_built.summary
    assert remote["version"] == local["version"] and remote["samples"] == 1773
    for shard in sorted(
        (digits_built.store / "digits/versions" / local["version"]).glob("*-[0-9]*")
    ):
        assert (
            shard.read_bytes()
            == (tmp_path / "remote/digits/versions" / remote["version"] / shard.name).read_bytes()
        )


def test_unreachable_scheduler_is_a_clear_error(tmp_path):
    """Dask keeps trying a refused connection until the timeout (10 s by default): 1 s here, through
    the variable the README documents."""
    shutil.copy(REPO / "pipelines" / "digits.yaml", tmp_path / "digits.yaml")
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "digits-0.csv").write_text("id,label,pixels,note\n")
    shutil.copy(REPO / "pipelines" / "digits_code.py", tmp_path / "digits_code.py")
    out = datapipe_in_process(
        "build",
        "digits.yaml",
        "--scheduler",
        "tcp://127.0.0.1:9",
        cwd=tmp_path,
        env={**os.environ, "DATAPIPE_SCHEDULER_TIMEOUT": "1"},
    )
    assert (
        out.returncode == 2
        and "cannot connect to a Dask scheduler" in out.stderr
        and "Traceback" not in out.stderr
    )
    assert "after 1 s" in out.stderr, out.stderr  # the timeout given
