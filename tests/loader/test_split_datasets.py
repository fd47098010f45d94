"""Reading one split of a version: open_dataset(split=), Loader(split=), ShardDataset(split=), their
state and errors, on a real build with splits."""

import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

import datapipe
from datapipe.builder.config import load_pipeline
from datapipe.builder.run import Execution, build
from datapipe.errors import ConfigError, NotFoundError
from datapipe.versioning.store import Store

PIPELINE = """\
name: rows
source: {path: raw/rows.csv, format: csv}
sample: {key: id, fields: {cls: label}}
shards: {max_samples: 25}
splits: {fractions: {train: 0.7, val: 0.2, test: 0.1}, seed: 3}
"""


@pytest.fixture(scope="module")
def split_store(tmp_path_factory, dask_client) -> Path:
    """A version of 'rows' (400 samples) built with train/val/test splits, in STORE; read it, do not
    change it."""
    root = tmp_path_factory.mktemp("splits")
    (root / "raw").mkdir()
    (root / "raw/rows.csv").write_text(
        "id,label\n" + "".join(f"r{i:04d},{i % 10}\n" for i in range(400))
    )
    (root / "pipeline.yaml").write_text(textwrap.dedent(PIPELINE))
    build(
        load_pipeline(root / "pipeline.yaml"),
        Store(str(root / "store")),
        execution=Execution(client=dask_client),
    )
    return root / "store"


def keys_of(loader) -> list[str]:
    return [k for batch in loader for k in batch["__key__"]]


def test_a_split_dataset_has_only_its_shards_in_its_own_numbering(split_store):
    whole = datapipe.open_dataset(f"{split_store}/rows")
    parts = {
        s: datapipe.open_dataset(f"{split_store}/rows@latest", split=s)
        for s in ("train", "val", "test")
    }
    assert whole.split is None and len(whole) == 400
    assert sum(len(d) for d in parts.values()) == 400
    val = parts["val"]
    assert val.split == "val" and val.version == whole.version
    assert val.shards == tuple(s for s in whole.manifest.shards if s.split == "val")
    assert val.shard_sizes.tolist() == [s.samples for s in val.shards]
    assert len(val) == whole.manifest.splits.samples["val"]
    assert val.fields == whole.fields and "split val" in repr(val)
    keys = [val[i]["__key__"] for i in range(len(val))]
    assert val[-1]["__key__"] == keys[-1]
    # split-local shard numbers
    got, columns = val.read_columns(np.array([1, 0]), np.array([0, 0]), ["cls"])
    assert got == [keys[int(val.shard_sizes[0])], keys[0]]
    assert not set(keys) & {parts["train"][i]["__key__"] for i in range(len(parts["train"]))}
    # the whole version's Dataset gives its splits too
    assert datapipe.open_dataset(whole, split="val").shards == val.shards
    assert datapipe.open_dataset(val, split="val") is val


def test_a_val_loader_reads_only_val_shards(split_store, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(split_store, copy)
    # the training shards are gone: a val loader never opens one
    for shard in copy.glob("rows/versions/*/train-*"):
        shard.unlink()
    val = datapipe.Loader(
        f"{copy}/rows", split="val", batch_size=16, num_workers=0, shuffle=False, drop_last="pad"
    )
    expected = datapipe.open_dataset(f"{split_store}/rows", split="val")
    got = keys_of(val)
    assert got[: len(expected)] == [expected[i]["__key__"] for i in range(len(expected))]
    assert set(got) == {expected[i]["__key__"] for i in range(len(expected))}
    with pytest.raises(NotFoundError, match=r"train-000000\.tar: missing"):
        datapipe.Loader(f"{copy}/rows", num_workers=0)


def test_the_loader_state_names_its_split_and_refuses_another(split_store):
    url = f"{split_store}/rows"
    train = datapipe.Loader(url, split="train", batch_size=8, num_workers=0)
    it = iter(train)
    next(it)
    state = train.state_dict()
    assert state["split"] == "train" and state["position"] == 8
    resumed = datapipe.Loader(url, split="train", batch_size=8, num_workers=0)
    resumed.load_state_dict(state)
    assert keys_of(resumed) == [k for batch in it for k in batch["__key__"]]
    for other in ("val", None):
        with pytest.raises(
            ConfigError,
            match="the state is for split 'train' of the dataset, this loader reads "
            f"split {other!r}",
        ):
            datapipe.Loader(url, split=other, batch_size=8, num_workers=0).load_state_dict(state)


def test_the_torch_dataset_takes_a_split(split_store):
    pytest.importorskip("torch")
    from datapipe.loader.torch import ShardDataset

    ds = ShardDataset(
        f"{split_store}/rows", batch_size=10, split="test", shuffle=False, drop_last="pad"
    )
    test = datapipe.open_dataset(f"{split_store}/rows", split="test")
    got, expected = (
        [k for batch in ds for k in batch["__key__"]],
        [test[i]["__key__"] for i in range(len(test))],
    )
    # (the last batch padded with repeats)
    assert got[: len(test)] == expected and set(got) == set(expected)


def test_an_unknown_split_lists_the_splits_and_a_version_without_splits_says_so(split_store, toy):
    with pytest.raises(
        ConfigError,
        match=r"split='dev': rows@[0-9a-f]{12} has no split 'dev'; its splits are "
        r"test, train, val$",
    ):
        datapipe.open_dataset(f"{split_store}/rows", split="dev")
    with pytest.raises(ConfigError, match="has no split 'dev'; its splits are test, train, val"):
        datapipe.Loader(f"{split_store}/rows", split="dev", num_workers=0)
    with pytest.raises(
        ConfigError,
        match=r"split='val': toy@[0-9a-f]{12} has no splits \(it was built without a "
        r"splits section\)",
    ):
        datapipe.open_dataset(toy, split="val")
    val = datapipe.open_dataset(f"{split_store}/rows", split="val")
    with pytest.raises(ConfigError, match="this Dataset is split 'val' of rows"):
        datapipe.open_dataset(val, split="train")
