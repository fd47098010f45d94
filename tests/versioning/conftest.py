import json
import uuid
from pathlib import Path

import jsonschema
import pytest
from sample_data import simple_samples

from datapipe.formats.registry import get_format
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store

SCHEMA = json.loads((Path(__file__).parents[2] / "schemas" / "manifest.schema.json").read_text())


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path) -> Store:
    """The same store tests run against local disk and fsspec's memory://."""
    if request.param == "local":
        return Store(str(tmp_path / "store"))
    return Store(f"memory://stores/{uuid.uuid4().hex}")


def commit(
    store: Store,
    samples_per_shard: list[list[dict]],
    name: str = "digits",
    fmt: str = "webdataset",
    refs=("latest",),
) -> Manifest:
    """Commit a version made of the given shards, validating its manifest against the schema."""
    shard_format = get_format(fmt)
    writer = store.begin(name)
    shards = tuple(writer.write_shard(i, s, shard_format) for i, s in enumerate(samples_per_shard))
    manifest = writer.commit(
        Manifest(
            name=name, shard_format=fmt, fields={"bin": "bytes", "cls": "bytes"}, shards=shards
        ),
        refs,
    )
    jsonschema.validate(
        json.loads(
            store.fs.cat_file(store.path(name, "versions", manifest.version, "manifest.json"))
        ),
        SCHEMA,
    )
    return manifest


def two_shards(seed: int = 0) -> list[list[dict]]:
    samples = simple_samples(30, size=50, seed=seed)
    return [samples[:20], samples[20:]]
