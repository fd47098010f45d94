"""A one-file text source in many blocks: an append or an edit re-measures only the blocks it
touched (a block is identified by its bytes), the rebuild gives the version a fresh build gives,
and an unchanged file's blocks are not read again for their digests."""

import json

import pytest

from datapipe.builder.config import load_pipeline
from datapipe.builder.run import build
from datapipe.builder.source.csvfile import CsvFormat
from datapipe.builder.source.jsonl import JsonlFormat
from datapipe.versioning.store import Store

JSONL = """\
    name: cars
    source: {path: raw/*.jsonl, format: jsonl, options: {blocksize: 16KB}}
    sample: {key: name, fields: {json: [cylinders, mpg, note]}}
    shards: {max_samples: 20}
    """
# quoted fields holding newlines: blocks aligned on records by the quote scan
CSV = """\
    name: people
    source: {path: raw/*.csv, format: csv, options: {blocksize: 4KB}}
    sample: {key: id, fields: {json: [name, age]}}
    shards: {max_samples: 20}
    """


def car(i: int, note: str = "") -> str:
    return json.dumps({"name": f"car{i:05d}", "cylinders": 4 + i % 5, "mpg": i % 40, "note": note})


def person(i: int) -> str:
    return f'{i},"Person {i},\nline two",{18 + i % 60}\n'


def scratch_version(project, tmp_path) -> str:
    loaded = load_pipeline(project.root / "pipeline.yaml")
    return build(loaded, Store(str(tmp_path / "scratch"))).manifest.version


def test_an_append_measures_only_the_last_blocks_and_writes_only_the_last_shards(project, tmp_path):
    project.pipeline(JSONL)
    lines = [car(i) for i in range(3000)]
    project.write("raw/cars.jsonl", "\n".join(lines) + "\n")
    first = project.build()
    blocks = first.incremental.partitions.measured
    assert blocks > 10
    with open(project.root / "raw/cars.jsonl", "a") as f:
        f.write("\n".join(car(i) for i in range(3000, 3003)) + "\n")
    again = project.build()
    assert again.manifest.version == scratch_version(project, tmp_path)
    parts = again.incremental.partitions
    assert parts.measured <= 2 and parts.reused >= blocks - 1
    # the planned shards of the unchanged blocks are the parent's without being written
    shards = again.incremental.shards
    assert shards.written <= 2 and shards.bytes_written < 3 * 20 * 1024


@pytest.mark.parametrize("note", ["same size", "a note longer than the one before"])
def test_an_edit_measures_only_the_blocks_near_it(project, tmp_path, note):
    project.pipeline(JSONL)
    lines = [car(i, note="x" * 9) for i in range(3000)]
    project.write("raw/cars.jsonl", "\n".join(lines) + "\n")
    blocks = project.build().incremental.partitions.measured
    lines[1500] = car(1500, note=note)
    project.write("raw/cars.jsonl", "\n".join(lines) + "\n")
    again = project.build()
    assert again.manifest.version == scratch_version(project, tmp_path)
    parts = again.incremental.partitions
    # the block holding it (and its neighbour, where a cut moved with the bytes): the blocks
    # after it start at anchor lines, which moved with their bytes
    assert parts.measured <= (1 if len(note) == 9 else 2)
    assert parts.measured + parts.reused == blocks
    assert again.incremental.shards.written <= 2 + parts.measured


def test_an_append_to_quoted_csv_measures_only_its_last_blocks(project, tmp_path):
    project.pipeline(CSV)
    rows = "".join(person(i) for i in range(1000))
    project.write("raw/people.csv", "id,name,age\n" + rows)
    first = project.build()
    assert first.incremental.partitions.measured > 4
    with open(project.root / "raw/people.csv", "a") as f:
        f.write("".join(person(i) for i in range(1000, 1003)))
    again = project.build()
    assert again.manifest.version == scratch_version(project, tmp_path)
    assert again.incremental.partitions.measured <= 2
    assert again.incremental.shards.written <= 2


def test_an_edit_to_quoted_csv_measures_only_the_blocks_near_it(project, tmp_path):
    project.pipeline(CSV.replace("4KB", "16KB"))
    rows = [person(i) for i in range(8000)]
    project.write("raw/people.csv", "id,name,age\n" + "".join(rows))
    blocks = project.build().incremental.partitions.measured
    assert blocks > 10
    rows[4000] = rows[4000].replace("Person", "A longer name, quoted")
    project.write("raw/people.csv", "id,name,age\n" + "".join(rows))
    again = project.build()
    assert again.manifest.version == scratch_version(project, tmp_path)
    # of 16: the edited block, its neighbour where the edited record was the anchor of a cut,
    # and a block whose anchor the shift carried across a nominal cut (9 with plain record cuts)
    assert again.incremental.partitions.measured <= 3
    assert again.incremental.shards.written <= 3


@pytest.mark.parametrize("fmt", [JsonlFormat, CsvFormat])
def test_an_unchanged_files_blocks_are_not_read_for_their_digests(project, monkeypatch, fmt):
    from datapipe.builder import known_hashes

    monkeypatch.setattr(known_hashes, "RACY_NS", 0)  # files written a moment ago count as settled
    if fmt is JsonlFormat:
        project.pipeline(JSONL)
        for n in range(2):
            project.write(f"raw/{n}.jsonl", "".join(car(n * 1000 + i) + "\n" for i in range(600)))
        grown = project.root / "raw/1.jsonl"
        more = car(1200) + "\n"
    else:
        project.pipeline(CSV)
        for n in range(2):
            rows = "".join(person(n * 1000 + i) for i in range(600))
            project.write(f"raw/{n}.csv", "id,name,age\n" + rows)
        grown = project.root / "raw/1.csv"
        more = person(1200)
    project.build()
    read = []
    parsed = fmt.parsed_bytes

    def spy(self, source, part):
        read.append(source.files[part.file].label)
        return parsed(self, source, part)

    monkeypatch.setattr(fmt, "parsed_bytes", spy)
    with open(grown, "a") as f:
        f.write(more)
    again = project.build()
    assert read and all(label.endswith(grown.name) for label in read)
    assert again.incremental.source_files.trusted == 1


def test_on_a_cluster_an_edit_rebuilds_its_block_and_keeps_the_other_shards(
    project, tmp_path, dask_client
):
    project.pipeline(JSONL)
    lines = [car(i, note="x" * 9) for i in range(3000)]
    project.write("raw/cars.jsonl", "\n".join(lines) + "\n")
    first = project.build(client=dask_client)
    lines[1500] = car(1500, note="a note longer than the one before")
    project.write("raw/cars.jsonl", "\n".join(lines) + "\n")
    again = project.build(client=dask_client)
    assert again.manifest.version == scratch_version(project, tmp_path)
    assert again.incremental.partitions.measured <= 2
    shards = again.incremental.shards
    assert shards.written <= 3 and shards.reused == len(again.manifest.shards) - shards.written
    old = {s.sha256 for s in first.manifest.shards}
    assert sum(s.sha256 not in old for s in again.manifest.shards) == shards.written
