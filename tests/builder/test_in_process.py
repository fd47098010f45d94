"""Small builds run in this process, with no cluster, to the same version a cluster builds."""

import json

import pytest
from helpers.cli import datapipe_in_process

from datapipe.builder.config import load_pipeline
from datapipe.builder.in_process import SMALL_BUILD_BYTES, small
from datapipe.builder.run import build
from datapipe.versioning.store import Store


def test_the_digits_build_in_process_is_the_clusters_version(digits_built, tmp_path, copy_digits):
    project = copy_digits(tmp_path / "project", "digits.yaml", "digits_code.py")
    result = build(load_pipeline(project / "digits.yaml"), Store(str(tmp_path / "store")))
    assert result.ran_on == "in-process" and digits_built.summary["ran_on"] == "scheduler"
    assert result.manifest.version == digits_built.version  # the id covers every shard's sha256


def test_workers_force_a_cluster_and_give_the_same_version(digits_built, tmp_path, copy_digits):
    project = copy_digits(tmp_path / "project", "digits.yaml", "digits_code.py")
    result = datapipe_in_process(
        "build", "digits.yaml", "--out", "store", "--workers", "1", "--json", cwd=project
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["ran_on"] == "local cluster" and summary["version"] == digits_built.version
    assert 50e6 < summary["worker_peak_rss"] < 4e9  # a worker's peak resident memory, in bytes
    text = datapipe_in_process("build", "digits.yaml", "--out", "store2", cwd=project).stdout
    assert "(in-process)" in text and "peak worker memory" in text


@pytest.mark.parametrize(
    ("size", "workers", "scheduler", "expected"),
    [
        (SMALL_BUILD_BYTES - 1, None, None, True),
        (SMALL_BUILD_BYTES, None, None, False),
        (1, 1, None, False),
        (1, None, "tcp://127.0.0.1:8786", False),
    ],
)
def test_only_a_small_source_without_a_cluster_asked_for_builds_in_process(
    size, workers, scheduler, expected
):
    assert small(size, workers, scheduler) is expected


@pytest.mark.parametrize(
    ("unread", "workers", "scheduler", "memory_limit", "expected"),
    [
        # a rebuild with little to read: --workers sizes nothing
        (SMALL_BUILD_BYTES - 1, 2, None, None, True),
        (SMALL_BUILD_BYTES, 2, None, None, False),
        (0, None, "tcp://127.0.0.1:8786", None, False),  # a scheduler is always used
        (0, 2, None, 10**9, False),  # and so are workers of a given memory limit
        (None, 2, None, None, False),  # no parent state to rebuild from
    ],
)
def test_a_rebuild_with_little_to_read_runs_in_process(
    unread, workers, scheduler, memory_limit, expected
):
    assert small(10 * SMALL_BUILD_BYTES, workers, scheduler, memory_limit, unread) is expected


def test_a_failed_task_is_raised_once_the_tasks_still_running_are_done():
    """A pass that fails must not leave a thread writing into the partial version the build then
    removes."""
    import time

    from dask import delayed

    from datapipe.builder.in_process import InProcessClient

    finished = []

    def slow():
        time.sleep(0.3)
        finished.append("slow")

    def failing():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        InProcessClient(threads=2).run_each(
            [delayed(slow, pure=False)(), delayed(failing, pure=False)()], lambda: None
        )
    assert finished == ["slow"]
