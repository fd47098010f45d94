"""datapipe.Loader in one process and with real DataLoader workers: coverage, equal batches,
determinism, resumption."""

import os
from collections import Counter

import numpy as np
import pytest
import torch
from sample_data import SIZES, make_dataset

import datapipe
from datapipe.errors import ConfigError, NotFoundError, ShardCorruptError

TOTAL = sum(SIZES)


def keys_of(batches) -> list[str]:
    return [k for b in batches for k in b["__key__"]]


def test_dataset_random_access_and_fields(toy):
    ds = datapipe.open_dataset(toy)
    assert len(ds) == TOTAL and ds.fields == {"bin": "bytes", "cls": "int"}
    assert ds[25] == {"__key__": "k00025", "cls": b"5", "bin": bytes([25]) * 9}
    assert ds[-1]["__key__"] == f"k{TOTAL - 1:05d}"


def test_the_loader_shows_the_settings_it_runs_with(toy):
    asked = dict(batch_size=8, shuffle=False, seed=5, drop_last="pad", block_shards=2)
    asked.update(fields=["cls"], decode={"cls": "int"}, num_workers=2, pin_memory=False)
    asked.update(download_ahead=3)
    loader = datapipe.Loader(toy, **asked)
    assert {name: getattr(loader, name) for name in asked} == asked
    assert loader.prefetch > 0 and datapipe.Loader(toy, num_workers=0).prefetch == 0
    assert loader.dataset.version == datapipe.open_dataset(toy).version
    with pytest.raises(AttributeError):
        loader.batch_sizes  # noqa: B018  (a misspelt setting is an error, not a silent None)


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_are_collated_tensors_and_cover_the_epoch_once(toy, workers):
    loader = datapipe.Loader(toy, batch_size=8, num_workers=workers, prefetch=2)
    batches = list(loader)
    assert (
        len(batches) == TOTAL // 8 == len(datapipe.Loader(toy, batch_size=8, num_workers=workers))
    )
    first = batches[0]
    assert first["cls"].dtype == torch.int64 and first["cls"].shape == (8,)
    assert all(isinstance(b, bytes) for b in first["bin"])
    for b in batches:
        for key, cls, payload in zip(b["__key__"], b["cls"].tolist(), b["bin"], strict=True):
            n = int(key[1:])
            assert cls == n % 10 and payload == bytes([n % 251]) * (n % 17 + 1)
    keys = keys_of(batches)
    assert len(set(keys)) == len(keys) == TOTAL - TOTAL % 8


def test_order_ignores_worker_count_and_follows_seed_and_epoch(toy):
    runs = {
        w: keys_of(datapipe.Loader(toy, batch_size=4, num_workers=w, seed=1)) for w in (0, 1, 3)
    }
    assert runs[0] == runs[1] == runs[3]
    assert keys_of(datapipe.Loader(toy, batch_size=4, num_workers=0, seed=2)) != runs[0]
    loader = datapipe.Loader(toy, batch_size=4, num_workers=0, seed=1)
    loader.set_epoch(1)
    assert keys_of(loader) != runs[0]
    unshuffled = keys_of(datapipe.Loader(toy, batch_size=4, num_workers=0, shuffle=False))
    assert unshuffled == sorted(unshuffled)


@pytest.mark.parametrize("drop_last", [True, "pad"])
def test_ranks_get_equal_batches_and_together_every_sample(toy, drop_last):
    world = 3
    per_rank = [
        list(
            datapipe.Loader(
                toy, batch_size=5, rank=r, world_size=world, num_workers=0, drop_last=drop_last
            )
        )
        for r in range(world)
    ]
    assert len({len(b) for b in per_rank}) == 1
    counts = Counter(k for batches in per_rank for k in keys_of(batches))
    if drop_last is True:
        assert all(c == 1 for c in counts.values()) and TOTAL - len(counts) < world * 5
    else:
        assert len(counts) == TOTAL and sum(counts.values()) - TOTAL < world * 5


def test_world_comes_from_torchrun_variables(toy, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = datapipe.Loader(toy, batch_size=4, num_workers=0)
    assert (loader.world.rank, loader.world.world_size) == (1, 2)


def test_state_dict_resumes_with_exactly_the_next_batch(toy):
    full = keys_of(datapipe.Loader(toy, batch_size=4, num_workers=2, seed=5))
    loader = datapipe.Loader(toy, batch_size=4, num_workers=2, seed=5)
    taken = []
    for i, batch in enumerate(loader):
        taken.extend(batch["__key__"])
        if i == 6:
            break
    state = loader.state_dict()
    assert state["position"] == 28 and len(str(state)) < 400
    resumed = datapipe.Loader(toy, batch_size=4, num_workers=1, seed=5)
    resumed.load_state_dict(state)
    resumed.set_epoch(0)  # the training loop's set_epoch of the resumed epoch keeps the position
    assert taken + keys_of(resumed) == full
    assert resumed.state_dict()["epoch"] == 1 and resumed.state_dict()["position"] == 0


def test_elastic_resume_finishes_the_epoch_exactly_once(toy):
    old = [
        datapipe.Loader(toy, batch_size=3, rank=r, world_size=2, num_workers=0, seed=9)
        for r in range(2)
    ]
    seen = []
    iters = [iter(loader) for loader in old]
    for _ in range(4):
        for it in iters:
            seen.extend(next(it)["__key__"])
    state = old[0].state_dict()
    assert state == old[1].state_dict()
    new = []
    for r in range(3):
        loader = datapipe.Loader(toy, batch_size=2, rank=r, world_size=3, num_workers=0, seed=9)
        loader.load_state_dict(state)
        new.append(keys_of(loader))
    assert len({len(k) for k in new}) == 1
    everything = seen + [k for keys in new for k in keys]
    assert len(everything) == len(set(everything)) and TOTAL - len(everything) < 3 * 2


def test_state_from_another_version_or_seed_is_refused(toy, tmp_path):
    state = datapipe.Loader(toy, batch_size=4, num_workers=0, seed=1).state_dict()
    with pytest.raises(ConfigError, match="seed"):
        datapipe.Loader(toy, batch_size=4, num_workers=0, seed=2).load_state_dict(state)
    other = make_dataset(tmp_path / "other", sizes=[3, 4])
    with pytest.raises(ConfigError, match="version"):
        datapipe.Loader(other, batch_size=2, num_workers=0, seed=1).load_state_dict(state)


def test_bad_arguments_are_clear(toy):
    with pytest.raises(ConfigError, match="drop_last"):
        datapipe.Loader(toy, drop_last=False)
    with pytest.raises(ConfigError, match="no field 'png'"):
        datapipe.Loader(toy, fields=["png"])
    with pytest.raises(ConfigError, match="give both rank and world_size"):
        datapipe.Loader(toy, rank=0)


def shard_file(url: str, n: int) -> str:
    store_dir, name = url.rsplit("/", 1)
    ds = datapipe.open_dataset(url)
    return ds.shard_path(n)


def test_a_missing_shard_is_named_before_any_worker_starts(toy):
    os.remove(shard_file(toy, 3))
    with pytest.raises(NotFoundError, match=r"shard-000003\.tar: missing .* \(shard 3\)"):
        datapipe.Loader(toy, num_workers=2)


def test_a_corrupt_shard_fails_in_the_main_process_naming_it(toy):
    path = shard_file(toy, 2)
    with open(path, "r+b") as f:  # same size, other bytes: the index no longer matches
        f.seek(600)
        f.write(b"\xff" * 8)
    # the worker's error, as itself
    with pytest.raises(ShardCorruptError, match=r"shard-000002\.tar"):
        list(datapipe.Loader(toy, batch_size=4, num_workers=2, shuffle=False))
    with pytest.raises(ShardCorruptError, match="sha256 does not match the manifest"):
        list(datapipe.Loader(toy, batch_size=4, num_workers=0, shuffle=False, verify=True))


def test_tfrecord_datasets_collate_the_same(tmp_path):
    url = make_dataset(tmp_path / "tf", fmt="tfrecord")
    batch = next(iter(datapipe.Loader(url, batch_size=6, num_workers=0, shuffle=False)))
    assert batch["__key__"] == [f"k{i:05d}" for i in range(6)]
    assert batch["cls"].tolist() == [i % 10 for i in range(6)]


def test_numpy_batches_without_torch_conversion_of_lists(toy):
    batch = next(iter(datapipe.Loader(toy, batch_size=4, num_workers=0, decode={"cls": "str"})))
    assert batch["cls"] == [k[-1] for k in batch["__key__"]]
    assert isinstance(np.asarray(batch["__key__"]), np.ndarray)


def fixed_size_dataset(root, payload: int, n: int, per_shard: int = 10) -> str:
    from datapipe.formats.registry import get_format
    from datapipe.versioning.manifest import Manifest
    from datapipe.versioning.store import Store

    writer = Store(str(root)).begin("fixed")
    samples = [
        {"__key__": f"s{i:04d}", "cls": str(i).encode(), "bin": bytes([i % 251]) * payload}
        for i in range(n)
    ]
    shards = tuple(
        writer.write_shard(
            s, samples[s * per_shard : (s + 1) * per_shard], get_format("webdataset")
        )
        for s in range(n // per_shard)
    )
    writer.commit(
        Manifest(
            name="fixed",
            shard_format="webdataset",
            fields={"bin": "bytes", "cls": "int"},
            shards=shards,
        )
    )
    return f"{root}/fixed"


def ragged_contents(batch) -> tuple:
    data, offsets = batch["bin"][0].numpy().tobytes(), batch["bin"][1].tolist()
    return (
        batch["__key__"],
        batch["cls"].tolist(),
        [data[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)],
    )


@pytest.mark.parametrize("shared", [False, True], ids=["pickled", "shared memory"])
def test_ragged_batches_are_the_same_in_process_and_from_workers(tmp_path, monkeypatch, shared):
    # with a tiny PIPE_LIMIT every batch is packed into a worker's shared-memory segments, and
    # 20 batches over 2 workers reuse each segment once the loop below has dropped its batch
    if shared:
        monkeypatch.setattr("datapipe.loader.torch.dataloader.PIPE_LIMIT", 1024)
    url = fixed_size_dataset(tmp_path, 4096, 160)
    runs = {
        w: [
            ragged_contents(b)
            for b in datapipe.Loader(url, batch_size=8, num_workers=w, decode={"bin": "ragged"})
        ]
        for w in (0, 2)
    }
    assert runs[0] == runs[2] and len(runs[0]) == 20
    for keys, labels, payloads in runs[0]:
        assert labels == [int(k[1:]) for k in keys] and payloads == [
            bytes([n % 251]) * 4096 for n in labels
        ]
    # a consumer that keeps every batch: no segment is reused under it
    kept = list(datapipe.Loader(url, batch_size=8, num_workers=2, decode={"bin": "ragged"}))
    assert [ragged_contents(b) for b in kept] == runs[0]


def test_a_shared_memory_segment_crosses_to_the_training_process_once(tmp_path, monkeypatch):
    """Later batches in a segment travel as its id (a segment costs a socket round trip to pass)."""
    from datapipe.loader.torch import dataloader, segments

    monkeypatch.setattr(dataloader, "PIPE_LIMIT", 1024)
    crossed = []

    class Segments(dict):  # the training process's segments by id: each is stored as it crosses
        def __setitem__(self, key, value):
            crossed.append(key)
            super().__setitem__(key, value)

    monkeypatch.setattr(segments, "_RECEIVED", Segments())
    url = fixed_size_dataset(tmp_path, 4096, 480)
    batches = [
        ragged_contents(b)
        for b in datapipe.Loader(
            url, batch_size=8, num_workers=2, prefetch=1, decode={"bin": "ragged"}
        )
    ]
    assert len(batches) == 60
    # once per slot at most: 2 workers x (prefetch + 4)
    assert 2 <= len(crossed) == len(set(crossed)) <= 2 * 5
    assert batches == [
        ragged_contents(b)
        for b in datapipe.Loader(url, batch_size=8, num_workers=0, decode={"bin": "ragged"})
    ]
    assert not segments._RECEIVED  # the run's segments are let go at its end


def test_scattered_samples_of_a_shuffled_batch_are_read_by_pread(tmp_path, monkeypatch):
    # 4 shards of 200 samples: a shuffled batch of 8 takes ~2 samples per shard, far apart
    url = fixed_size_dataset(tmp_path, 100, 800, per_shard=200)
    calls = []
    real = os.preadv
    monkeypatch.setattr(
        os, "preadv", lambda fd, buffers, offset: calls.append(offset) or real(fd, buffers, offset)
    )
    # fewer descriptors than shards stay open
    monkeypatch.setattr("datapipe.loader.preads.OPEN_FDS", 2)
    loader = datapipe.Loader(
        url, batch_size=8, num_workers=0, decode={"bin": "ragged"}, block_shards=80
    )
    batches = [ragged_contents(b) for b in loader]
    # one read per sample for most of them (a lone sample goes through the map)
    assert len(calls) > 400
    assert 0 < len(loader.dataset.files._preads) <= 2
    seen = []
    for keys, labels, payloads in batches:
        assert labels == [int(k[1:]) for k in keys] and payloads == [
            bytes([n % 251]) * 100 for n in labels
        ]
        seen += keys
    assert sorted(seen) == [f"s{i:04d}" for i in range(800)] and seen != sorted(seen)


def test_a_shard_cut_short_while_open_is_named(tmp_path):
    url = fixed_size_dataset(tmp_path, 100, 800, per_shard=200)
    ds = datapipe.open_dataset(url)
    # scattered: read by pread
    rows, shard = np.array([0, 50, 120, 199]), np.zeros(4, dtype=np.int64)
    ds.read_columns(shard, rows, ["bin"])  # opens shard 0
    os.truncate(ds.shard_path(0), 4096)
    with pytest.raises(ShardCorruptError, match="shard-000000"):
        ds.read_columns(shard, rows, ["bin"])
