"""The build's summary weighs the shards on disk against the field bytes they hold, and says what
to choose when a format's own bytes dominate (small tabular rows in WebDataset tar)."""

import json

import pytest
from helpers.cli import datapipe_in_process

ROWS = [(f"r{i:04d}", ("dog", "cat")[i % 2], 10000 + 7 * i) for i in range(300)]
PIPELINE = """\
name: {name}
source: {{path: raw/pets.csv, format: csv}}
sample:
  key: id
  fields: {fields}
shards: {{format: {fmt}, max_bytes: 1MB}}
"""


def field_bytes(fields: str) -> int:
    """The bytes of the rows' field values as the samples hold them (a number kept by TFRecord as
    a number: 8 bytes)."""
    if fields == "{species: species, zip: zip}":
        return sum(len(s) + len(str(z)) for _, s, z in ROWS)
    return sum(
        len(json.dumps({"species": s, "zip": z}, separators=(",", ":")).encode())
        for _, s, z in ROWS
    )


@pytest.fixture
def pets(project):
    lines = ["id,species,zip", *(f"{k},{s},{z}" for k, s, z in ROWS)]
    project.write("raw/pets.csv", "\n".join(lines) + "\n")
    return project


def build(project, name, fmt, fields):
    project.pipeline(PIPELINE.format(name=name, fmt=fmt, fields=fields), f"{name}.yaml")
    out = datapipe_in_process("build", f"{name}.yaml", "--out", "store", "--json", cwd=project.root)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), out.stderr


def test_small_fields_in_tar_are_weighed_and_answered_with_what_to_choose(pets):
    summary, stderr = build(pets, "tar", "webdataset", "{species: species, zip: zip}")
    cost = summary["overhead"]
    assert cost["on_disk"] == summary["bytes"]
    assert cost["fields"] == field_bytes("{species: species, zip: zip}")
    assert cost["ratio"] > 100  # two 512-byte headers and padding for about 8 bytes
    assert "shards.format: tfrecord" in cost["advice"] and "warning: " in stderr
    # as text: the ratio on the totals line, the advice on stderr
    text = datapipe_in_process("build", "tar.yaml", "--out", "store", cwd=pets.root)
    assert f"({cost['ratio']:.1f}x the fields' " in text.stdout
    assert "WebDataset tar spends a 512-byte header" in text.stderr


def test_one_json_field_in_tfrecord_needs_no_advice(pets):
    fields = "{json: [species, zip]}"
    summary, stderr = build(pets, "tf", "tfrecord", fields)
    cost = summary["overhead"]
    assert cost["fields"] == field_bytes(fields) and cost["on_disk"] == summary["bytes"]
    assert 1 < cost["ratio"] < 3 and cost["advice"] is None and "warning" not in stderr


def test_a_build_that_reuses_its_parents_partitions_still_weighs_them(pets):
    first, _ = build(pets, "tar", "webdataset", "{species: species, zip: zip}")
    again, _ = build(pets, "tar", "webdataset", "{species: species, zip: zip}")
    assert again["incremental"]["partitions"]["reused"] >= 1
    assert again["overhead"] == first["overhead"]
