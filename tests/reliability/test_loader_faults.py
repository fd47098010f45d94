"""A DataLoader worker killed mid-epoch: a clear error in the training process, and a restart from
the last state_dict finishes the epoch with every sample exactly once."""

import os
import signal
from pathlib import Path

import pytest
from sample_data import SIZES, make_dataset

import datapipe

MARKER = Path(os.environ.get("TMPDIR", "/tmp")) / f"datapipe-kill-worker-{os.getpid()}"


def die_when_asked(payload: bytes) -> int:
    """A decoder that kills its DataLoader worker once the test drops the marker file: the worker
    that removes the marker dies (removal is the atomic claim: with exists-then-unlink both workers
    could see it and die)."""
    try:
        MARKER.unlink()
    except FileNotFoundError:
        return int(payload)
    os.kill(os.getpid(), signal.SIGKILL)
    return int(payload)


def test_killed_worker_is_reported_and_the_epoch_resumes_exactly_once(tmp_path):
    url = make_dataset(tmp_path / "store")
    total = sum(SIZES)
    loader = datapipe.Loader(
        url, batch_size=4, num_workers=2, prefetch=1, seed=4, decode={"cls": die_when_asked}
    )
    seen, state = [], None
    with pytest.raises(
        RuntimeError,
        match=r"DataLoader worker \(pid\(s\) \d+\) exited unexpectedly|killed by " r"signal",
    ):
        for i, batch in enumerate(loader):
            seen.extend(batch["__key__"])
            state = loader.state_dict()  # what a checkpoint after this step holds
            if i == 3:
                MARKER.touch()
    MARKER.unlink(missing_ok=True)
    consumed = seen[: state["position"]]
    resumed = datapipe.Loader(url, batch_size=4, num_workers=2, seed=4)
    resumed.load_state_dict(state)
    rest = [k for batch in resumed for k in batch["__key__"]]
    everything = consumed + rest
    assert len(everything) == len(set(everything)) == total - total % 4
