"""A datapipe error raised in a DataLoader worker reaches the training process as itself: same
class, same shard."""

import os
import pickle

import pytest
from torch.utils.data import DataLoader

import datapipe
from datapipe.errors import ConfigError, ShardCorruptError
from datapipe.loader.torch import ShardDataset


def corrupt(url: str, shard: int) -> str:
    path = datapipe.open_dataset(url).shard_path(shard)
    # same size, other bytes: the index no longer matches the tar headers
    with open(path, "r+b") as f:
        f.seek(600)
        f.write(b"\xff" * 8)
    return os.path.basename(path)


def test_datapipe_errors_survive_pickling_with_their_attributes():
    e = ShardCorruptError("s/shard-1.tar", "bad header", 1536)
    e.add_note("in DataLoader worker 1")
    back = pickle.loads(pickle.dumps(e))
    assert (
        type(back) is ShardCorruptError
        and str(back) == str(e) == "s/shard-1.tar at byte 1536: bad header"
    )
    assert (back.shard, back.offset, back.__notes__) == (
        "s/shard-1.tar",
        1536,
        ["in DataLoader worker 1"],
    )
    config = pickle.loads(pickle.dumps(ConfigError("batch_size must be at least 1")))
    assert type(config) is ConfigError and str(config) == "batch_size must be at least 1"


@pytest.mark.parametrize("workers", [0, 2])
def test_a_corrupt_shard_in_a_worker_raises_shard_corrupt_error_in_the_training_process(
    toy, workers
):
    name = corrupt(toy, 2)
    with pytest.raises(ShardCorruptError, match=name) as raised:
        list(datapipe.Loader(toy, batch_size=4, num_workers=workers, shuffle=False))
    # what the CLI prints
    assert raised.value.shard.endswith(name) and "Traceback" not in str(raised.value)
    if workers:
        assert any("DataLoader worker" in note for note in raised.value.__notes__)


def read_all(loader: DataLoader) -> list:
    """Every batch of a user's own DataLoader, its workers stopped before an error leaves: left to
    the garbage collector, torch's shutdown can miss a worker and wait seconds for it, in whichever
    test runs then."""
    batches = iter(loader)
    try:
        return list(batches)
    finally:
        batches._shutdown_workers()


def test_a_users_own_dataloader_gets_the_same_class_too(toy):
    name = corrupt(toy, 2)
    with pytest.raises(ShardCorruptError, match=name):
        read_all(
            DataLoader(
                ShardDataset(toy, batch_size=4, shuffle=False), batch_size=None, num_workers=2
            )
        )


def closure(payload: bytes):
    return lambda: payload  # what no DataLoader worker can send


@pytest.mark.parametrize("own", [False, True], ids=["Loader", "user's own DataLoader"])
def test_a_decoded_value_that_cannot_leave_a_worker_is_a_config_error_not_a_hang(toy, own):
    """The DataLoader's queue thread prints a pickling error and drops the batch, and the training
    process would wait for it for ever; the worker pickles the batch itself and names the field."""
    import threading

    if own:
        loader = DataLoader(
            ShardDataset(toy, batch_size=4, shuffle=False, decode={"cls": closure}),
            batch_size=None,
            num_workers=2,
        )
    else:
        loader = datapipe.Loader(
            toy, batch_size=4, num_workers=2, shuffle=False, decode={"cls": closure}
        )
    outcome = []

    def consume():
        try:
            read_all(loader) if own else list(loader)
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive(), "the loader hung"
    assert len(outcome) == 1 and type(outcome[0]) is ConfigError
    assert "field 'cls'" in str(outcome[0]) and "num_workers=0" in str(outcome[0])


def test_the_workers_are_stopped_when_the_error_reaches_the_training_process(toy):
    """Not later, by the garbage collector: the error's traceback keeps the DataLoader's iterator,
    and a worker stopped from the collector could miss its stop signal and wait for torch to kill it
    after a timeout."""
    import gc
    import multiprocessing

    corrupt(toy, 2)
    gc.disable()  # what the test is about: nothing may rely on a collection
    try:
        # other tests' DataLoaders may still wait for theirs
        before = set(multiprocessing.active_children())
        with pytest.raises(ShardCorruptError) as raised:
            list(datapipe.Loader(toy, batch_size=4, num_workers=2, shuffle=False))
        assert set(multiprocessing.active_children()) <= before, (
            "DataLoader workers still running after the error"
        )
        del raised
    finally:
        gc.enable()
