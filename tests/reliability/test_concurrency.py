"""Two `datapipe build` processes into one store at once, of different pipelines and of the same
one: both finish (or one fails cleanly), every ref names a version that verifies, and nothing one
wrote is lost to the other."""

import json
import subprocess

import pytest
from conftest import leftovers
from helpers.cli import datapipe_in_process, datapipe_process


def build_together(project, store, pipelines):
    # in process (the digits are small): what races is the commit into the store, which the client
    # does either way
    procs = [
        datapipe_process(
            "build",
            p,
            "--out",
            str(store),
            "--json",
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in pipelines
    ]
    return [(p, *p.communicate(timeout=600)) for p in procs]


@pytest.mark.parametrize(
    "pipelines",
    [("digits.yaml", "digits_tfrecord.yaml"), ("digits.yaml", "digits.yaml")],
    ids=["different", "same"],
)
def test_concurrent_builds_into_one_store(digits_project, tmp_path, pipelines):
    store = tmp_path / "store"
    results = build_together(digits_project, store, pipelines)
    ok = [
        json.loads(out.strip().splitlines()[-1]) for proc, out, _ in results if proc.returncode == 0
    ]
    for proc, _, err in results:
        assert proc.returncode == 0 or ("error:" in err and "Traceback" not in err)
    assert ok, "at least one build finishes"
    for summary in ok:
        name = summary["name"]
        assert (store / name / "refs" / "latest").read_text().strip() == summary["version"]
        assert datapipe_in_process("verify", f"{store}/{name}", cwd=digits_project).returncode == 0
    if pipelines[0] == pipelines[1]:
        # the same inputs: the same version, written once
        assert len({s["version"] for s in ok}) == 1
    assert leftovers(store) == []
