import pytest

from datapipe.formats.registry import get_format
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store

SIZES = [7, 13, 20, 5, 11, 9, 16]


def sample(n: int) -> dict:
    return {"__key__": f"k{n:05d}", "cls": str(n % 10).encode(), "bin": bytes([n % 251]) * (n % 17 + 1)}


def make_dataset(root, sizes=SIZES, fmt="webdataset", name="toy") -> str:
    """A committed version with shards of the given sizes; returns its dataset URL."""
    store = Store(str(root))
    shard_format = get_format(fmt)
    writer = store.begin(name)
    shards, n = [], 0
    for i, size in enumerate(sizes):
        shards.append(writer.write_shard(i, [sample(n + j) for j in range(size)], shard_format))
        n += size
    writer.commit(Manifest(name=name, shard_format=fmt, fields={"bin": "bytes", "cls": "int"}, shards=tuple(shards)))
    return f"{root}/{name}"


@pytest.fixture
def toy(tmp_path) -> str:
    return make_dataset(tmp_path / "store")
