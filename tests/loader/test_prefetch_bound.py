"""What `prefetch` bounds, as the README says: batches made ahead of the training loop are at most
about 2 x prefetch per DataLoader worker (its thread's queue plus the DataLoader's prefetch_factor),
prefetch in process; by default none in process (no thread sharing the GIL with the loop) and 4 per
worker."""

import functools
import os
import threading
import time

import pytest
from sample_data import SIZES

import datapipe

TOTAL = sum(SIZES)


def record(path: str, payload: bytes) -> bytes:
    """A decoder that notes every sample it decodes, in whichever process decodes it."""
    with open(path, "ab") as f:
        f.write(b"x")
    return payload


def settled(log: str, quiet: float = 0.3, longest: float = 2.0) -> int:
    """The samples decoded so far, once no more were for ``quiet`` seconds (the producers wait at
    their bound), or after ``longest`` seconds."""
    deadline = time.monotonic() + longest
    made, still_since = os.path.getsize(log), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - still_since < quiet:
        time.sleep(0.02)
        now = os.path.getsize(log)
        if now != made:
            made, still_since = now, time.monotonic()
    return made


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_made_ahead_stay_within_the_prefetch_bound(toy, tmp_path, workers):
    log = str(tmp_path / "decoded")
    prefetch = 2
    loader = datapipe.Loader(
        toy,
        batch_size=1,
        num_workers=workers,
        prefetch=prefetch,
        decode={"bin": functools.partial(record, log)},
    )
    assert loader.prefetch_depth() == prefetch and len(loader) == TOTAL
    batches = iter(loader)
    for consumed in range(1, 4):
        next(batches)
        made = settled(log)  # a slow training step: producers run ahead as far as they may
        # per producer: its queue, the batch it is finishing, and with workers the DataLoader's
        # prefetch_factor
        ahead = prefetch + 1 if workers == 0 else workers * (2 * prefetch + 1)
        assert consumed <= made <= consumed + ahead < TOTAL
    batches.close()


def test_in_process_batches_are_made_when_the_loop_asks_by_default(toy, tmp_path):
    log = str(tmp_path / "decoded")
    loader = datapipe.Loader(
        toy, batch_size=1, num_workers=0, decode={"bin": functools.partial(record, log)}
    )
    assert loader.prefetch_depth() == 0
    assert datapipe.Loader(toy, batch_size=1, num_workers=2).prefetch_depth() == 4
    batches = iter(loader)
    for consumed in range(1, 4):
        next(batches)
        time.sleep(0.3)  # a thread ahead would decode more meanwhile
        assert os.path.getsize(log) == consumed
        assert not [t for t in threading.enumerate() if t.name == "datapipe-prefetch"]
    batches.close()
