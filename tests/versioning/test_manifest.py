"""assemble_manifest: a new version's manifest from a build's pieces."""

import hashlib
import json
from dataclasses import replace

import pytest
from sample_data import make_dataset

from datapipe.errors import FormatVersionError, IntegrityError
from datapipe.versioning.manifest import (
    MANIFEST_NAME,
    REJECTED_NAME,
    CodeRef,
    Lineage,
    Manifest,
    ShardEntry,
    SourceFile,
    Splits,
    StageCounts,
    assemble_manifest,
)
from datapipe.versioning.store import Store

SHARD = ShardEntry("shard-000000.tar", 3, 3072, "a" * 64, "shard-000000.tar.idx", 40, "b" * 64)


def test_field_kinds_of_every_partition_are_merged_in_name_order():
    m = assemble_manifest(
        "toy",
        "webdataset",
        [SHARD],
        [StageCounts("source", 3, 3)],
        [{"png": {"bytes"}, "cls": {"int"}}, {"cls": {"str"}}, {}],
        Lineage(seed=7),
    )
    assert m.fields == {"cls": "int|str", "png": "bytes"} and list(m.fields) == ["cls", "png"]
    assert m.shards == (SHARD,) and m.samples == 3 and m.lineage.seed == 7
    assert m.rejected is None and m.rejected_rows == 0


def test_rejected_rows_name_the_quarantine():
    stages = (StageCounts("source", 5, 4, 0, 1), StageCounts("stages[0].validate", 4, 3, 0, 1))
    m = assemble_manifest("toy", "tfrecord", iter([SHARD]), iter(stages), iter([]), Lineage())
    assert (
        m.rejected == REJECTED_NAME
        and m.rejected_rows == 2
        and m.stages == stages
        and m.fields == {}
    )
    assert (
        m.with_id().version
        == assemble_manifest("toy", "tfrecord", [SHARD], stages, [], Lineage()).with_id().version
    )


# --- manifest.json bytes and version ids ----------------------------------------------------------

LINEAGE = Lineage(
    pipeline={"name": "tøy", "stages": [{"filter": "a > 1"}], "x": 1.5, "n": None},
    sources=(SourceFile("raw/a.csv", 10, "f" * 64), SourceFile("s3://b/ü.csv", 0, "etag-1")),
    code=(CodeRef("mypkg.clean", "0" * 64),),
    seed=7,
    environment={"python": "3.11", "datapipe": "0.1.0"},
)
SHARED = ShardEntry(
    "shard-000001.tar",
    2,
    2048,
    "c" * 64,
    "shard-000001.tar.idx",
    30,
    "d" * 64,
    stored_in="e" * 64,
    stored_as=("shard-000007.tar", "shard-000007.tar.idx"),
)
WITH_SPLITS = Manifest(
    name="sp",
    shard_format="webdataset",
    fields={},
    shards=(replace(SHARD, split="train"), replace(SHARED, split="val")),
    splits=Splits({"train": 0.8, "val": 0.2}, {"train": 3, "val": 2}, by="id", seed=3),
    lineage=LINEAGE,
    parent="9" * 64,
    created_at="2026-01-01T00:00:00.123456+00:00",
    host="h",
)
# every optional part of a manifest, each as earlier datapipe versions wrote it: (manifest, sha256
# of its manifest.json, its version id), pinned when they were first written
PINNED = [
    (
        Manifest(
            name="toy",
            shard_format="webdataset",
            fields={"png": "bytes", "cls": "int|str"},
            shards=(SHARD,),
        ),
        "fda7b15b935c0bb11e04741f8770889b3f81a09c1fdbc5f76c4e61863afe2a7c",
        "11f10810b2f98832b62ba7530bd926066f80856c0a128bbdad7e597863475987",
    ),
    (
        assemble_manifest(
            "t.o-y_2",
            "tfrecord",
            [SHARD, SHARED],
            [StageCounts("source", 5, 4, 0, 1), StageCounts("x", 4, 4)],
            [{"cls": {"int"}}],
            LINEAGE,
            classes=["cat", "dög"],
        ),
        "031199d6d1893fe34a72f85b6a4d05210089199ddda37dda48605c2012536854",
        "40c02c8d1cbdee068620489c8a587aa2e9236690e9c46b91d5d4de4602717712",
    ),
    (
        WITH_SPLITS,
        "cc792bb791bd035187906944718744e88eb1f694318945202f3eaeab6c3e78d7",
        "e011c153a690f32e095fac3c5d86912b6168ddeddc6b5a5027265eb4f46ef3ec",
    ),
    (  # format 1, and a fraction written as an integer
        replace(
            WITH_SPLITS,
            format_version=1,
            splits=Splits({"train": 1, "val": 0.5}, {"train": 3, "val": 2}),
        ),
        "474e8f9fef162d2703c8c434a6ae9be8b2d6d2a20afb05b24ac4c061a0edc697",
        "03d7e3032f15f9d01cd1c3d3318a25b71f2d76b3628e5b20cdb605bdda76dab0",
    ),
]


@pytest.mark.parametrize(("manifest", "file_sha256", "version"), PINNED)
def test_manifest_bytes_and_version_ids_do_not_change(manifest, file_sha256, version):
    manifest = manifest.with_id()
    assert manifest.version == version
    assert hashlib.sha256(manifest.to_json()).hexdigest() == file_sha256


@pytest.mark.parametrize(("manifest", "file_sha256", "version"), PINNED)
def test_a_manifest_round_trips_byte_for_byte(manifest, file_sha256, version):
    data = manifest.with_id().to_json()
    read = Manifest.from_json(data, "manifest.json")
    assert read == manifest.with_id() and read.to_json() == data and read.content_id() == version
    assert type(read.shards) is tuple and all(type(s) is ShardEntry for s in read.shards)


def test_a_stored_manifest_round_trips_byte_for_byte(tmp_path):
    url = make_dataset(tmp_path / "store")
    store = Store(url.rsplit("/", 1)[0])
    data = store.fs.cat_file(store.path("toy", "versions", store.resolve("toy"), MANIFEST_NAME))
    assert Manifest.from_json(data, "manifest.json").to_json() == data


@pytest.mark.parametrize("version", [0, 4, "2", None, 1.5])
def test_an_unknown_format_version_is_a_clear_error(version):
    raw = json.loads(WITH_SPLITS.with_id().to_json())
    raw["format_version"] = version
    with pytest.raises(
        FormatVersionError, match=f"m.json: manifest format version {version!r} is not supported"
    ):
        Manifest.from_json(json.dumps(raw).encode(), "m.json")


def _edited(edit) -> bytes:
    raw = json.loads(WITH_SPLITS.with_id().to_json())
    edit(raw)
    return json.dumps(raw).encode()


def test_an_unknown_key_inside_a_shard_names_the_keys_a_shard_has():
    data = _edited(lambda raw: raw["shards"][1].update(colour="red"))
    with pytest.raises(IntegrityError) as info:
        Manifest.from_json(data, "m.json")
    assert str(info.value).startswith(
        "m.json: malformed manifest: field 'shards[1].colour': not a shard field "
        "(known: path, samples, bytes, sha256, index_path, index_bytes, index_sha256, split, "
        "stored_in, stored_as, companions, tokens); "
    )


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda raw: raw["shards"][0].update(stored_as=["a.tar", "a.idx", "b"]),
            'shards[0].stored_as\': expected at most 2 items, got list ["a.tar", "a.idx", "b"]',
        ),
        (
            lambda raw: raw["splits"].update(fractions="most"),
            'splits.fractions\': expected an object, got str "most"',
        ),
        (
            lambda raw: raw["lineage"]["sources"].append({"path": 3}),
            "lineage.sources[2].path': expected a string, got int 3",
        ),
        (
            lambda raw: raw["shards"][0].update(stored_as=["a.tar"]),
            "shards[0].stored_as[1]': missing",
        ),
        (lambda raw: raw.pop("version"), "version': missing"),
        (
            lambda raw: raw.update(format_version=True),
            "format_version': expected an integer, got bool true",
        ),
    ],
)
def test_a_wrong_nested_value_is_named_by_its_path(edit, problem):
    with pytest.raises(IntegrityError) as info:
        Manifest.from_json(_edited(edit), "m.json")
    assert str(info.value).startswith(f"m.json: malformed manifest: field '{problem}; ")


def test_splits_that_name_different_splits_in_samples_and_fractions_are_refused():
    def edit(raw):
        raw["splits"]["samples"]["extra"] = raw["splits"]["samples"].pop("val")

    with pytest.raises(
        IntegrityError, match="'splits.samples' and 'splits.fractions' name different"
    ):
        Manifest.from_json(_edited(edit), "m.json")
