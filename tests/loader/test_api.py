"""The Loader's API points: a Dataset object, world detection, decoders, numpy without torch,
ShardDataset in a user's DataLoader, world-size independence of the order, and resumption across
worlds, workers and drop_last."""

import io
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.distributed as dist
from PIL import Image
from sample_data import SIZES
from torch.utils.data import DataLoader

import datapipe
from datapipe.errors import ConfigError
from datapipe.formats.registry import get_format
from datapipe.loader.torch import ShardDataset
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store

TOTAL = sum(SIZES)


def keys_of(batches) -> list[str]:
    return [k for b in batches for k in b["__key__"]]


def test_loader_takes_a_dataset_object(toy):
    ds = datapipe.open_dataset(toy)
    loader = datapipe.Loader(ds, batch_size=4, num_workers=0, seed=3)
    assert loader.dataset is ds
    assert keys_of(loader) == keys_of(datapipe.Loader(toy, batch_size=4, num_workers=0, seed=3))


def test_an_initialised_process_group_decides_the_world_before_the_environment(
    toy, monkeypatch, tmp_path
):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    # the environment, with no group
    assert datapipe.Loader(toy, num_workers=0).world.world_size == 2
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1
    )
    try:
        world = datapipe.Loader(toy, num_workers=0).world
        assert (world.rank, world.world_size) == (0, 1)
        # arguments win over both
        explicit = datapipe.Loader(toy, num_workers=0, rank=2, world_size=3).world
        assert (explicit.rank, explicit.world_size) == (2, 3)
    finally:
        dist.destroy_process_group()


# A dataset with a field of every decoded kind -----------------------------------------------------


def image_bytes(n: int, fmt: str) -> bytes:
    pixels = np.full((6, 5), n * 7 % 256, dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt, **({"quality": 100} if fmt == "JPEG" else {}))
    return out.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def matrix(n: int) -> np.ndarray:
    return (np.arange(12, dtype=np.float32).reshape(3, 4) + n).astype(np.float32)


def mixed_sample(n: int) -> dict:
    return {
        "__key__": f"m{n:04d}",
        "png": image_bytes(n, "PNG"),
        "jpg": image_bytes(n, "JPEG"),
        "npy": npy_bytes(matrix(n)),
        "json": json.dumps({"n": n, "tags": ["a"] * (n % 3)}).encode(),
        "score": repr(n / 8 - 1.5).encode(),
        "cls": str(n % 10).encode(),
    }


MIXED_FIELDS = {
    "png": "bytes",
    "jpg": "bytes",
    "npy": "npy",
    "json": "json",
    "score": "float",
    "cls": "int",
}


def write_dataset(
    root, name: str, samples: list[dict], fields: dict[str, str], per_shard: int
) -> str:
    writer = Store(str(root)).begin(name)
    fmt = get_format("webdataset")
    shards = tuple(
        writer.write_shard(s, samples[at : at + per_shard], fmt)
        for s, at in enumerate(range(0, len(samples), per_shard))
    )
    writer.commit(Manifest(name=name, shard_format="webdataset", fields=fields, shards=shards))
    return f"{root}/{name}"


@pytest.fixture
def mixed(tmp_path) -> str:
    return write_dataset(
        tmp_path / "store", "mixed", [mixed_sample(n) for n in range(60)], MIXED_FIELDS, 13
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_every_decoder_in_process_and_in_workers(mixed, workers):
    loader = datapipe.Loader(
        mixed, batch_size=8, num_workers=workers, seed=4, decode={"png": "image", "jpg": "image"}
    )
    batches = list(loader)
    assert len(batches) == 60 // 8
    for batch in batches:
        ns = [int(k[1:]) for k in batch["__key__"]]
        assert batch["png"].dtype == torch.uint8 and batch["png"].shape == (8, 6, 5)
        assert batch["png"].tolist() == [np.full((6, 5), n * 7 % 256).tolist() for n in ns]
        assert batch["jpg"].shape == (8, 6, 5)  # JPEG is lossy: close, not equal
        assert (
            batch["jpg"].int() - torch.tensor([n * 7 % 256 for n in ns])[:, None, None]
        ).abs().max() <= 2
        assert batch["npy"].dtype == torch.float32 and batch["npy"].shape == (8, 3, 4)
        assert (batch["npy"].numpy() == np.stack([matrix(n) for n in ns])).all()
        assert batch["json"] == [{"n": n, "tags": ["a"] * (n % 3)} for n in ns]
        assert batch["score"].dtype == torch.float64 and batch["score"].tolist() == [
            n / 8 - 1.5 for n in ns
        ]
        assert batch["cls"].tolist() == [n % 10 for n in ns]
    assert sorted(keys_of(batches)) == sorted(set(keys_of(batches)))


NO_TORCH = """
import sys
sys.modules["torch"] = None  # as if torch were not installed
import numpy as np
import datapipe
from datapipe.errors import ConfigError
loader = datapipe.Loader({url!r}, batch_size=8, num_workers=0, decode={{"png": "image"}})
batches = list(loader)
assert len(batches) == 7
batch = batches[0]
assert type(batch["cls"]) is np.ndarray and batch["cls"].dtype == np.int64
assert type(batch["png"]) is np.ndarray and batch["png"].shape == (8, 6, 5)
assert type(batch["npy"]) is np.ndarray and batch["npy"].shape == (8, 3, 4)
assert type(batch["score"]) is np.ndarray and batch["score"].dtype == np.float64
assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
try:
    datapipe.Loader({url!r}, batch_size=8, num_workers=2)
except ConfigError as e:
    print("ConfigError:", e)
"""


def test_numpy_batches_without_torch_and_a_clear_error_for_workers(mixed):
    out = subprocess.run(
        [sys.executable, "-c", NO_TORCH.format(url=mixed)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (
        "ConfigError: num_workers > 0 needs torch" in out.stdout and "num_workers=0" in out.stdout
    )


def test_shard_dataset_in_a_users_dataloader_gives_the_loaders_batches(toy):
    expected = list(datapipe.Loader(toy, batch_size=4, num_workers=0, seed=6))
    ds = ShardDataset(toy, batch_size=4, seed=6)
    assert len(ds) == len(expected)
    batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert keys_of(batches) == keys_of(expected)
    assert all(torch.equal(a["cls"], b["cls"]) for a, b in zip(batches, expected, strict=True))
    assert keys_of(
        DataLoader(ShardDataset(toy, batch_size=4, seed=6, epoch=1), batch_size=None, num_workers=2)
    ) != keys_of(expected)


@pytest.mark.parametrize("world", [2, 3])
def test_the_global_order_does_not_depend_on_the_world_size(toy, world):
    one_rank = keys_of(datapipe.Loader(toy, batch_size=2, num_workers=0, seed=8))
    ranks = [
        list(datapipe.Loader(toy, batch_size=2, rank=r, world_size=world, num_workers=0, seed=8))
        for r in range(world)
    ]
    interleaved = [
        k for step in zip(*ranks, strict=True) for batch in step for k in batch["__key__"]
    ]
    assert (
        interleaved == one_rank[: len(interleaved)] and len(one_rank) - len(interleaved) < world * 2
    )


def test_elastic_resume_then_the_next_epoch_in_the_new_world(toy):
    old = [
        datapipe.Loader(toy, batch_size=3, rank=r, world_size=2, num_workers=0, seed=9)
        for r in range(2)
    ]
    iters = [iter(loader) for loader in old]
    for _ in range(4):
        for it in iters:
            next(it)
    state = old[0].state_dict()
    new = [
        datapipe.Loader(toy, batch_size=2, rank=r, world_size=3, num_workers=w, seed=9)
        for r, w in zip(range(3), (0, 2, 1), strict=True)
    ]
    for loader in new:
        loader.load_state_dict(state)
    for epoch in (0, 1):
        per_rank = []
        for loader in new:
            loader.set_epoch(epoch)
            per_rank.append(list(loader))
        assert len({len(b) for b in per_rank}) == 1
        assert all(loader.state_dict()["epoch"] == epoch + 1 for loader in new)
    # epoch 1 is a whole epoch of the new world: the 1-rank order of epoch 1, dealt to 3 ranks of 2
    reference = datapipe.Loader(toy, batch_size=2, num_workers=0, seed=9)
    reference.set_epoch(1)
    one_rank = keys_of(reference)
    interleaved = [
        k for step in zip(*per_rank, strict=True) for batch in step for k in batch["__key__"]
    ]
    assert interleaved == one_rank[: len(interleaved)] and len(per_rank[0]) == TOTAL // 6


@pytest.mark.parametrize("drop_last", [True, "pad"])
@pytest.mark.parametrize(("before", "after"), [(0, 2), (2, 1), (3, 0)])
def test_resumption_is_exact_for_any_worker_count_and_drop_last(toy, drop_last, before, after):
    def make(workers: int) -> datapipe.Loader:
        return datapipe.Loader(
            toy,
            batch_size=3,
            rank=1,
            world_size=2,
            num_workers=workers,
            seed=2,
            drop_last=drop_last,
        )

    full = keys_of(make(0))
    assert len(full) == 3 * ((TOTAL + 5) // 6 if drop_last == "pad" else TOTAL // 6)
    for stop in (1, 5, len(full) // 3 - 1):
        loader = make(before)
        taken = []
        for batch in loader:
            taken += batch["__key__"]
            if len(taken) == 3 * stop:
                break
        resumed = make(after)
        resumed.load_state_dict(loader.state_dict())
        assert taken + keys_of(resumed) == full


def test_a_number_field_with_a_payload_that_is_not_a_number_names_the_field(tmp_path):
    samples = [{"__key__": f"s{n}", "score": b"1.5" if n != 3 else b"n/a"} for n in range(8)]
    url = write_dataset(tmp_path / "store", "bad", samples, {"score": "float"}, 4)
    with pytest.raises(ConfigError, match="field 'score': .*not one float64 number"):
        list(datapipe.Loader(url, batch_size=8, num_workers=0, shuffle=False))
    with pytest.raises(ConfigError, match="field 'score'"):  # from a worker too, as itself
        list(datapipe.Loader(url, batch_size=8, num_workers=2, shuffle=False))
    batch = next(
        iter(
            datapipe.Loader(
                url, batch_size=8, num_workers=0, shuffle=False, decode={"score": "str"}
            )
        )
    )
    assert batch["score"][3] == "n/a"


def _batches(loader):
    return [
        (
            batch["__key__"],
            batch["cls"].tolist(),
            bytes(batch["bin"][0].numpy()),
            batch["bin"][1].tolist(),
        )
        for batch in loader
    ]


@pytest.mark.parametrize("workers", [0, 2])
def test_pin_memory_gives_the_same_batches(toy, workers, monkeypatch):
    """pin_memory=True: the same batches. This machine has no CUDA, so page-locked buffers are stood
    in for by plain ones to run the pinned path (gathered into one buffer ahead, unpacked into
    views); benchmarks/ gpu_transfer.py checks real pinning and copies to a GPU."""
    from datapipe.loader.torch import dataloader as loader_torch

    def kwargs(pin):
        return dict(
            batch_size=5,
            num_workers=workers,
            shuffle=True,
            seed=3,
            pin_memory=pin,
            decode={"bin": "ragged"},
        )

    plain = _batches(datapipe.Loader(toy, **kwargs(False)))
    assert _batches(datapipe.Loader(toy, **kwargs(True))) == plain  # no device: pinning is skipped
    given = []

    def buffer(nbytes):
        tensor = torch.empty(nbytes, dtype=torch.uint8)
        given.append(tensor.data_ptr())
        return tensor, tensor.numpy()

    monkeypatch.setattr(loader_torch, "can_pin", lambda: True)
    monkeypatch.setattr(loader_torch, "pinned_buffer", buffer)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self.clone())
    # the DataLoader's pinning thread needs a device: call what it calls on each worker batch
    if workers:
        packed = loader_torch.Packed(np.arange(10, dtype=np.uint8), [], None).pin_memory()
        assert isinstance(packed.buffer, torch.Tensor) and packed.buffer.tolist() == list(range(10))
    pinned = datapipe.Loader(toy, **kwargs(True))
    assert _batches(pinned) == plain
    if workers == 0:  # each batch's tensors are views of one buffer from the page-locked allocator
        batch = next(iter(pinned))
        assert batch["bin"][0].untyped_storage().data_ptr() in given
        assert (
            batch["cls"].untyped_storage().data_ptr()
            == batch["bin"][0].untyped_storage().data_ptr()
        )


def test_the_loader_passes_its_retry_limit_to_the_store(toy, monkeypatch):
    monkeypatch.setenv("DATAPIPE_RETRIES", "7")
    assert datapipe.Loader(toy, batch_size=4, num_workers=0).dataset.store.retry.attempts == 7
    assert (
        datapipe.Loader(toy, batch_size=4, num_workers=0, retries=2).dataset.store.retry.attempts
        == 2
    )
