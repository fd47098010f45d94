"""On S3, a rebuilt shard with the bytes of a stored one is stored once: the new version names the
directory that holds it (no second object), and reads and verifies as a fresh build."""

import pytest

from datapipe.builder.config import load_pipeline
from datapipe.builder.run import build
from datapipe.versioning.history import usage
from datapipe.versioning.store import Store
from datapipe.versioning.verify import verify_version

pytestmark = pytest.mark.s3


def rows(first: int, n: int) -> str:
    return "".join(f"{i},{'y' * (20 + i % 40)}\n" for i in range(first, first + n))


def test_an_append_to_one_file_shares_the_stored_shards_on_s3(s3, tmp_path):
    (tmp_path / "raw").mkdir()
    pipeline = tmp_path / "rows.yaml"
    pipeline.write_text(
        "name: rows\nsource: {path: raw/rows.csv, format: csv}\n"
        "sample: {key: id, fields: {txt: text}}\nshards: {max_samples: 10}\n"
    )
    source = tmp_path / "raw" / "rows.csv"
    source.write_text("id,text\n" + rows(0, 300))
    store = Store(f"s3://{s3['bucket']}/same-bytes")
    first = build(load_pipeline(pipeline), store)
    with open(source, "a") as f:
        f.write(rows(300, 3))
    again = build(load_pipeline(pipeline), store)
    scratch = build(load_pipeline(pipeline), Store(f"s3://{s3['bucket']}/scratch"))
    assert again.manifest.version == scratch.manifest.version
    shards = again.incremental.shards
    assert shards.written <= 2 and shards.reused == len(again.manifest.shards) - shards.written
    old = {s.sha256 for s in first.manifest.shards}
    shared = [s for s in again.manifest.shards if s.stored_in]
    assert len(shared) == shards.reused
    assert all(s.stored_in == first.manifest.version and s.sha256 in old for s in shared)
    # the new version's directory holds only the shards it wrote
    directory = store.path("rows", "versions", again.manifest.version)
    objects = {p.rsplit("/", 1)[-1] for p in store.fs.ls(directory, detail=False, refresh=True)}
    assert not {s.path for s in shared} & objects
    assert {s.path for s in again.manifest.shards if not s.stored_in} <= objects
    assert not verify_version(store, "rows", again.manifest, again.manifest.version)
    stored = usage(store, "rows")["stored_bytes"]
    assert stored == first.manifest.bytes + shards.bytes_written
