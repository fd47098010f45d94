"""kill -9 `datapipe build` at moments spread over the build, and kill Dask workers under it: every ref
still names a complete version that verifies, no partial version is listed, a rerun gives the same
version id, and gc removes every leftover."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from conftest import crash_moments, datapipe_cli, last_json, leftovers


def start_build(project, store, *extra):
    return subprocess.Popen([sys.executable, "-m", "datapipe", "build", "digits.yaml", "--out", str(store),
                             "--workers", "2", *extra], cwd=project, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def kill_group(proc) -> None:
    """SIGKILL the build and everything it started (its Dask scheduler lives in it; workers die with it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(60)


def store_is_consistent(project, store) -> list[str]:
    listed = json.loads(datapipe_cli("ls", str(store), "--json", cwd=project).stdout or "[]")
    refs_dir = store / "digits" / "refs"
    for ref in refs_dir.iterdir() if refs_dir.exists() else ():
        version = ref.read_text().strip()
        assert version in {r["version"] for r in listed}, f"ref {ref.name} names an unlisted version"
        assert datapipe_cli("verify", f"{store}/digits@{ref.name}", cwd=project).returncode == 0
    return [r["version"] for r in listed]


@pytest.mark.slow
def test_kill_9_at_random_moments_leaves_only_complete_versions(digits_project, tmp_path):
    reference = last_json(datapipe_cli("build", "digits.yaml", "--out", str(tmp_path / "ref"), "--workers", "2",
                                       "--json", cwd=digits_project))["version"]
    start = time.monotonic()
    datapipe_cli("build", "digits.yaml", "--out", str(tmp_path / "timing"), "--workers", "2", cwd=digits_project)
    duration = time.monotonic() - start
    store = tmp_path / "store"
    rng = random.Random(8)
    moments = sorted(rng.uniform(0.05, 1.0) * duration for _ in range(crash_moments(5)))
    for moment in moments:
        proc = start_build(digits_project, store)
        time.sleep(moment)
        kill_group(proc)
        for version in store_is_consistent(digits_project, store):
            assert version == reference  # anything listed is the whole, verified version
    rerun = last_json(datapipe_cli("build", "digits.yaml", "--out", str(store), "--workers", "2", "--json",
                                   cwd=digits_project))
    assert rerun["version"] == reference
    assert datapipe_cli("gc", f"{store}/digits", cwd=digits_project).returncode == 0
    assert leftovers(store) == []
    assert store_is_consistent(digits_project, store) == [reference]


KILLER = '''
import os, signal
from pathlib import Path
from digits_code import pixels_to_png

def pixels_then_die(frame):
    marker = Path(__file__).with_name("{marker}")
    if {always} or not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)  # the Dask worker process running this task dies
    return pixels_to_png(frame)
'''


@pytest.mark.parametrize("always", [False, True])
def test_a_dask_worker_killed_mid_build(digits_project, tmp_path, always):
    (digits_project / "killer.py").write_text(KILLER.format(marker="killed-once", always=always))
    pipeline = (digits_project / "digits.yaml").read_text().replace("digits_code:pixels_to_png",
                                                                    "killer:pixels_then_die")
    (digits_project / "digits.yaml").write_text(pipeline)
    store = tmp_path / "store"
    out = datapipe_cli("build", "digits.yaml", "--out", str(store), "--workers", "2", "--json", cwd=digits_project)
    if always:  # every try dies: a clear failure, and no ref moves
        assert out.returncode == 8 and "a Dask worker died" in out.stderr
        assert not (store / "digits" / "refs").exists() or not list((store / "digits" / "refs").iterdir())
    else:  # Dask reruns the lost task on a fresh worker: the build recovers
        assert out.returncode == 0, out.stderr
        assert datapipe_cli("verify", f"{store}/digits", cwd=digits_project).returncode == 0
