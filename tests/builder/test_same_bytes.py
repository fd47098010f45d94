"""A shard whose bytes a version of the dataset already stores is stored once: a one-file source
edited or appended to rebuilds with most of its shards the stored files, whatever its layout."""

import json
import os
import re

import pytest

from datapipe.builder.config import load_pipeline
from datapipe.builder.run import build
from datapipe.versioning.store import Store
from datapipe.versioning.verify import verify_version

CSV = """\
    name: passengers
    source: {path: raw/passengers.csv, format: csv}
    sample: {key: id, fields: {json: [pclass, name, age]}}
    shards: {max_samples: 14}
    """
JSONL = """\
    name: cars
    source: {path: raw/cars.jsonl, format: jsonl}
    sample: {key: Name, fields: {json: [Cylinders, MPG]}}
    shards: {max_samples: 4}
    """


def passengers(first: int, n: int) -> str:
    return "".join(
        f'{i},{1 + i % 3},"Name{i}, Mr. {i * 7 % 101}",{18 + i % 60}\n'
        for i in range(first, first + n)
    )


def cars(n: int) -> list[str]:
    return [
        json.dumps({"Name": f"car {i}", "Cylinders": 4 + i % 5, "MPG": 10 + i % 30})
        for i in range(n)
    ]


def inodes(store: Store, name: str, manifest) -> dict[str, int]:
    """sha256 -> inode of each shard file of a version."""
    directory = store.path(name, "versions", manifest.version)
    return {s.sha256: os.stat(f"{directory}/{s.path}").st_ino for s in manifest.shards}


def check_stored_once(project, tmp_path, first, again, name: str) -> None:
    """``again`` is the version a build from scratch gives, and each of its shards with the bytes of
    one of ``first`` is that file."""
    scratch = build(load_pipeline(project.root / "pipeline.yaml"), Store(str(tmp_path / "scratch")))
    assert again.manifest.version == scratch.manifest.version
    before, after = (
        inodes(project.store, name, first.manifest),
        inodes(project.store, name, again.manifest),
    )
    same = set(before) & set(after)
    shards = again.incremental.shards
    assert shards.reused == len(same) and shards.written == len(after) - len(same)
    assert all(before[sha] == after[sha] for sha in same)
    written = sum(s.bytes for s in again.manifest.shards if s.sha256 not in same)
    assert shards.bytes_written == written
    assert not verify_version(project.store, name, again.manifest, again.manifest.version)


@pytest.mark.parametrize("in_memory", ["small shards", "none"])
def test_an_append_to_a_one_file_csv_reuses_every_shard_it_left_alone(
    project, tmp_path, monkeypatch, in_memory
):
    from datapipe.versioning import writer

    if in_memory == "none":  # every shard written, then replaced by a link to the stored one
        monkeypatch.setattr(writer, "IN_MEMORY_BYTES", -1)
    project.pipeline(CSV)
    project.write("raw/passengers.csv", "id,pclass,name,age\n" + passengers(0, 1313))
    first = project.build()
    with open(project.root / "raw/passengers.csv", "a") as f:
        f.write(passengers(1313, 3))
    again = project.build()
    check_stored_once(project, tmp_path, first, again, "passengers")
    assert again.incremental.shards.reused >= len(first.manifest.shards) - 2
    assert again.incremental.shards.written <= 3


def test_a_few_rows_edited_in_a_one_file_jsonl_rewrite_only_their_shards(project, tmp_path):
    project.pipeline(JSONL)
    lines = cars(406)
    project.write("raw/cars.jsonl", "\n".join(lines) + "\n")
    first = project.build()
    for k in (50, 200, 350):
        lines[k] = lines[k].replace('"MPG": ', '"MPG": 1')
    project.write("raw/cars.jsonl", "\n".join(lines) + "\n")
    again = project.build()
    check_stored_once(project, tmp_path, first, again, "cars")
    # three edited rows: their shards, and the shards where a cut moved
    assert again.incremental.shards.written <= 6
    assert again.incremental.shards.reused >= len(again.manifest.shards) - 6


def test_a_full_builds_summary_counts_the_shards_it_kept_once(project):
    from helpers.cli import datapipe_in_process

    project.pipeline(JSONL)
    project.write("raw/cars.jsonl", "\n".join(cars(40)) + "\n")
    first = datapipe_in_process("build", "pipeline.yaml", "--out", "store", cwd=project.root)
    assert first.returncode == 0, first.stderr
    first_id = project.store.read_ref("cars", "latest")
    # another pipeline file, the same shards: a full build that stores none of them again
    project.pipeline(JSONL.replace("max_samples: 4}", "max_samples: 4, max_bytes: 1GB}"))
    out = datapipe_in_process("build", "pipeline.yaml", "--out", "store", cwd=project.root)
    line = next(x for x in out.stdout.splitlines() if x.startswith("full build: "))
    kept = re.search(r"; shards 0 written, (\d+) reused$", line)
    assert kept and int(kept[1]) == len(project.store.manifest("cars", first_id).shards), line


def test_a_full_build_and_an_older_version_share_their_equal_shards(project, tmp_path):
    project.pipeline(JSONL)
    lines = cars(120)
    project.write("raw/cars.jsonl", "\n".join(lines) + "\n")
    first = project.build()
    project.write("raw/cars.jsonl", "\n".join(lines[:60]) + "\n")
    project.build()
    # a pipeline change that leaves these shards' bytes alone: a full build, yet the shards the
    # grandparent holds are its files
    project.pipeline(JSONL.replace("max_samples: 4}", "max_samples: 4, max_bytes: 1GB}"))
    project.write("raw/cars.jsonl", "\n".join(lines) + "\n")
    again = project.build()
    assert again.incremental.full_because is not None
    assert again.incremental.shards.written == 0
    assert inodes(project.store, "cars", again.manifest) == inodes(
        project.store, "cars", first.manifest
    )


def test_a_parquet_file_rewritten_with_more_rows_stores_only_the_new_shards(project, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write(n: int) -> None:
        ids = [f"p{i:05d}" for i in range(n)]
        table = pa.table({"id": ids, "value": [i % 13 for i in range(n)]})
        pq.write_table(table, project.root / "raw/table.parquet")

    (project.root / "raw").mkdir()
    project.pipeline(
        "name: table\nsource: {path: raw/table.parquet, format: parquet}\n"
        "sample: {key: id, fields: {json: [value]}}\nshards: {max_samples: 8}\n"
    )
    write(500)
    first = project.build()
    write(503)
    again = project.build()
    check_stored_once(project, tmp_path, first, again, "table")
    assert again.incremental.shards.written <= 2
