"""A pass that cannot progress (no worker left, every worker paused at its memory limit, or some
paused and none working) fails instead of waiting; a pass that does progress reports each of its
tasks once."""

import logging
import time

import pytest
from distributed import Client, LocalCluster

from datapipe.builder import pass_runner, sizing
from datapipe.builder.progress import BuildProgress
from datapipe.errors import BuildError


def _sleep(seconds):
    time.sleep(seconds)
    return seconds


def test_a_pass_without_workers_is_an_error_not_a_wait(monkeypatch):
    from dask import delayed

    monkeypatch.setattr(pass_runner, "STALL_CHECK_SECONDS", 0.5)
    monkeypatch.setattr(pass_runner, "STALL_CHECKS", 2)
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=False,
            dashboard_address=None,
            silence_logs=logging.CRITICAL,
        ) as cluster,
        Client(cluster) as client,
    ):
        run = pass_runner.PassRunner(client, BuildProgress())
        assert run("warm", [delayed(_sleep)(0)]) == [0]  # a healthy pass finishes
        cluster.scale(0)
        deadline = time.time() + 10
        while client.scheduler_info()["workers"] and time.time() < deadline:
            time.sleep(0.1)
        with pytest.raises(BuildError, match="measure: no Dask worker is left .*--memory-limit"):
            run("measure", [delayed(_sleep, pure=False)(0.1)])


def worker(status="running", **tasks):
    """A worker as the scheduler describes it: its status and its tasks' states."""
    return {"status": status, "metrics": {"task_counts": tasks}}


@pytest.mark.parametrize(
    ("workers", "words"),
    [
        ({}, "no Dask worker is left"),
        ({"a": worker("paused"), "b": worker("paused")}, "every Dask worker is paused"),
        # the running one waits on what the paused one holds
        ({"a": worker("paused", ready=29), "b": worker(memory=488)}, "1 of 2 Dask workers"),
        ({"a": worker("paused", executing=1), "b": worker()}, None),  # it ends its task
        ({"a": worker("paused"), "b": worker(executing=1)}, None),
        ({"a": worker("paused"), "b": worker(flight=3)}, None),  # fetching what it needs
        ({"a": worker(ready=5), "b": worker()}, None),  # nothing paused: slow, not stuck
    ],
)
def test_a_cluster_is_stuck_when_no_worker_can_go_on(workers, words):
    why = pass_runner.why_stuck(workers)
    assert why is None if words is None else words in why


def test_dask_counts_a_block_of_signatures_at_its_size():
    import numpy as np
    from dask.sizeof import sizeof

    from datapipe.builder.removals import Signed

    signed = Signed(np.zeros((1000, 1024), np.uint32), np.array(["d00001"] * 1000))
    assert sizeof(signed) >= 1000 * 1024 * 4 + signed.labels.nbytes


class Counted(BuildProgress):
    def __init__(self) -> None:
        self.totals: dict[str, int] = {}
        self.done: dict[str, int] = {}

    def phase(self, name: str, total: int) -> None:
        self.totals[name] = total
        self.done[name] = 0

    def advance(self, name: str, done: int = 1) -> None:
        assert self.done[name] + done <= self.totals[name], (name, self.done[name], done)
        self.done[name] += done


def test_a_pass_reports_every_task_once_and_returns_the_results_in_order(dask_client):
    from dask import delayed

    progress = Counted()
    run = pass_runner.PassRunner(dask_client, progress)
    tasks = [delayed(_sleep, pure=False)(0.001 * (i % 7)) for i in range(300)]
    assert run("write shards", tasks) == [0.001 * (i % 7) for i in range(300)]
    assert run("measure", [delayed(_sleep, pure=False)(0)]) == [0]
    assert progress.totals == progress.done == {"write shards": 300, "measure": 1}


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ([0, 400_000_000], None),  # a worker without a limit: nothing to fit
        # the smallest worker decides
        ([400_000_000, 12_000_000_000], (0.6 * 400_000_000 - (160 << 20)) // 20),
        ([200_000_000], 1 << 20),  # below the baseline: the smallest blocks
    ],
)
def test_blocks_fit_the_smallest_worker(limits, expected):
    assert sizing.fitting_blocksize(limits) == expected


def test_a_tokenize_stage_leaves_its_tokenizer_and_batch_room_in_each_worker():
    from datapipe.builder.tokenize_stage import BATCH_CHARS, TokenizerFile, tokenize_memory

    file = TokenizerFile(b"x" * (2 << 20), "0" * 64, "bpe.json", 50_000, 0, None)
    room = tokenize_memory(file)
    assert room > 16 * (2 << 20) + 16 * BATCH_CHARS and tokenize_memory(None) == 0
    plain = sizing.fitting_blocksize([2_000_000_000])
    assert abs(sizing.fitting_blocksize([2_000_000_000], room) - (plain - room // 20)) <= 1


def test_encode_batches_are_bounded_by_documents_and_characters():
    from datapipe.builder.tokenize_stage import BATCH, BATCH_CHARS, batches

    many = ["ab"] * (2 * BATCH + 3)
    assert [len(b) for b in batches(many)] == [BATCH, BATCH, 3]
    big = ["x" * (BATCH_CHARS // 3)] * 7 + ["y" * (2 * BATCH_CHARS)] + ["z"]
    cut = list(batches(big))
    assert [len(b) for b in cut] == [3, 3, 1, 1, 1]  # the long document goes alone
    assert sum(cut, []) == big


def test_shards_a_worker_cannot_write_fail_before_any_pass_naming_max_bytes():
    from datapipe.errors import BuildError

    sizing.check_shard_size(64 * 10**6, [400_000_000])  # the default shards on small workers
    with pytest.raises(
        BuildError,
        match=r"shards.max_bytes: shards of 256000000 bytes .* a worker "
        r"has 600000000 bytes\. Give the workers more memory",
    ):
        sizing.check_shard_size(256 * 10**6, [600_000_000, 600_000_000], 90 << 20)
    sizing.check_shard_size(256 * 10**6, [600_000_000, 0])  # a worker of no known limit: no guess
