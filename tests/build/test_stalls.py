"""A pass that cannot progress (no worker left, every worker paused at its memory limit) fails instead of waiting."""

import logging
import time

import pytest
from distributed import Client, LocalCluster

from datapipe.build import run as build_run
from datapipe.build.progress import BuildProgress
from datapipe.errors import BuildError


def _sleep(seconds):
    time.sleep(seconds)
    return seconds


def test_a_pass_without_workers_is_an_error_not_a_wait(monkeypatch):
    from dask import delayed

    monkeypatch.setattr(build_run, "STALL_CHECK_SECONDS", 0.5)
    monkeypatch.setattr(build_run, "STALL_CHECKS", 2)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                      silence_logs=logging.CRITICAL) as cluster, Client(cluster) as client:
        runner = build_run._Runner(client, BuildProgress())
        assert runner("warm", [delayed(_sleep)(0)]) == [0]  # a healthy pass finishes
        cluster.scale(0)
        deadline = time.time() + 10
        while client.scheduler_info()["workers"] and time.time() < deadline:
            time.sleep(0.1)
        with pytest.raises(BuildError, match="measure: no Dask worker is left .*--memory-limit"):
            runner("measure", [delayed(_sleep, pure=False)(0.1)])


@pytest.mark.parametrize(("limits", "expected"), [
    ([0, 400_000_000], None),  # a worker without a limit: nothing to fit
    ([400_000_000, 12_000_000_000], (0.6 * 400_000_000 - (160 << 20)) // 20),  # the smallest worker decides
    ([200_000_000], 1 << 20),  # below the baseline: the smallest blocks
])
def test_blocks_fit_the_smallest_worker(limits, expected):
    assert build_run.fitting_blocksize(limits) == expected
