"""`datapipe check`'s report: every way a rebuild can differ is named, and a same rebuild says
nothing."""

from __future__ import annotations

import dataclasses

from conftest import commit, two_shards

from datapipe.versioning.manifest import CodeRef, Lineage, SourceFile, StageCounts
from datapipe.versioning.manifest_parts import TokenizerRef
from datapipe.versioning.rebuild_report import (
    field_changes,
    manifest_differences,
    sample_differences,
)

LINEAGE = Lineage(
    pipeline={"name": "digits", "stages": [{"filter": "label >= 0"}], "shards": {"max": 10}},
    sources=(SourceFile("a.csv", 10, "sha256:aa"), SourceFile("b.csv", 20, "sha256:bb")),
    code=(CodeRef("clean", "11"), CodeRef("gone", "22")),
    seed=0,
)


def test_the_same_manifest_has_no_differences(store):
    recorded = commit(store, two_shards())
    assert manifest_differences(recorded, recorded) == []


def test_every_difference_of_shards_fields_counts_and_format_is_named(store):
    recorded = dataclasses.replace(
        commit(store, two_shards(0)), stages=(StageCounts("source", 30, 30),)
    )
    other = commit(store, [two_shards(1)[0]], name="other")
    rebuilt = dataclasses.replace(
        other,
        format_version=recorded.format_version - 1,
        shard_format="tfrecord",
        fields={"bin": "bytes", "extra": "int"},
        stages=(StageCounts("source", 30, 20, 10),),
    )
    lines = manifest_differences(recorded, rebuilt)
    assert lines[0].startswith(f"manifest format {recorded.format_version} -> ")
    assert "shard format: webdataset -> tfrecord" in lines
    assert "field cls: bytes -> None" in lines and "field extra: None -> int" in lines
    first, second = (s.path for s in recorded.shards)
    assert f"shard {second}: only in the recorded version" in lines
    (changed,) = [line for line in lines if line.startswith(f"shard {first}: content differs")]
    assert "(20 -> 20 samples, sha256 " in changed
    assert "stage counts differ: source out 20" in lines


def test_a_shard_only_in_the_rebuild_is_named(store):
    recorded = commit(store, [two_shards()[0]])
    rebuilt = commit(store, two_shards())
    extra = rebuilt.shards[1].path
    assert manifest_differences(recorded, rebuilt) == [f"shard {extra}: only in the rebuild"]


def test_each_lineage_input_that_changed_is_named(store):
    recorded = dataclasses.replace(commit(store, two_shards()), lineage=LINEAGE)
    rebuilt = dataclasses.replace(
        recorded,
        lineage=dataclasses.replace(
            LINEAGE,
            pipeline={"name": "digits", "stages": [{"filter": "label > 0"}], "shards": {"max": 9}},
            sources=(SourceFile("a.csv", 10, "sha256:a2"), SourceFile("c.csv", 5, "sha256:cc")),
            code=(CodeRef("clean", "12"), CodeRef("new", "33")),
            seed=1,
        ),
    )
    assert [line.removeprefix("lineage: ") for line in manifest_differences(recorded, rebuilt)] == [
        "pipeline config: shards.max",
        "pipeline config: stages",
        "source removed: b.csv",
        "source added: c.csv",
        "source changed: a.csv (sha256:aa -> sha256:a2)",
        "code changed: clean",
        "code changed: gone",
        "code changed: new",
        "seed: 0 -> 1",
    ]


def test_field_changes_show_short_values_and_sizes_of_long_ones():
    old = {"__key__": "k", "a": b"cat", "b": b"\x00" * 100, "c": 1, "gone": b"x", "n": "x" * 50}
    new = {"__key__": "k", "a": b"dog", "b": b"\x01" * 100, "c": 1, "new": 2, "n": "y" * 50}
    assert field_changes(old, new) == [
        "a 'cat' -> 'dog'",
        "b 100 bytes -> 100 bytes",
        "gone only in the recorded version",
        f"n {repr('x' * 50)[:37]}... -> {repr('y' * 50)[:37]}...",
        "new only in the rebuild",
    ]


def test_sample_differences_name_changed_removed_and_added_keys(store):
    samples = two_shards()
    recorded = commit(store, samples)
    edited = [dict(s) for s in samples[0][1:]] + [dict(s) for s in samples[1]]
    edited[0]["cls"] = b"changed"
    edited.append({**samples[1][0], "__key__": "brand-new"})
    rebuilt = commit(store, [edited], name="rebuilt")
    lines = sample_differences(
        (store, "digits", recorded), (store, "rebuilt", rebuilt), shown=SHOWN
    )
    assert lines[0] == "samples: 1 changed, 1 only in the recorded version, 1 only in the rebuild"
    changed_key, removed_key = samples[0][1]["__key__"], samples[0][0]["__key__"]
    assert any(
        line.startswith(f"sample {changed_key} (") and "cls " in line and "'changed'" in line
        for line in lines
    ), lines
    assert f"sample {removed_key}: only in the recorded version" in lines
    assert "sample brand-new: only in the rebuild" in lines


def test_sample_differences_count_what_they_do_not_show(store):
    samples = two_shards()
    recorded = commit(store, samples)
    shifted = [{**s, "cls": b"other"} for s in samples[0] + samples[1]]
    shifted += [{**samples[0][0], "__key__": f"new-{i}"} for i in range(3)]
    rebuilt = commit(store, [shifted], name="rebuilt")
    lines = sample_differences((store, "digits", recorded), (store, "rebuilt", rebuilt), shown=2)
    assert lines[0] == "samples: 30 changed, 0 only in the recorded version, 3 only in the rebuild"
    assert "... and 1 more samples only in the rebuild" in lines
    assert lines[-1] == "... and 28 more changed samples (`datapipe diff` lists them all)"
    assert sample_differences((store, "digits", recorded), (store, "digits", recorded)) == []


SHOWN = 10


TOKENIZER = TokenizerRef("tokenizer.json", 1000, "a" * 64, "0.21.0", 400, "uint16", 0, None)


def test_a_changed_tokenizer_file_or_library_is_named_and_changes_the_id(store):
    recorded = dataclasses.replace(
        commit(store, two_shards()), lineage=dataclasses.replace(LINEAGE, tokenizer=TOKENIZER)
    )

    def rebuilt_with(**changed):
        tokenizer = dataclasses.replace(TOKENIZER, **changed)
        lineage = dataclasses.replace(LINEAGE, tokenizer=tokenizer)
        return dataclasses.replace(recorded, lineage=lineage)

    assert manifest_differences(recorded, recorded) == []
    (line,) = manifest_differences(recorded, rebuilt_with(sha256="b" * 64))
    assert line.startswith("lineage: tokenizer file changed: sha256 aaaaaaaaaaaa -> bbbbbbbbbbbb")
    assert manifest_differences(recorded, rebuilt_with(library="0.22.1")) == [
        "lineage: tokenizers library: 0.21.0 -> 0.22.1"
    ]
    ids = {recorded.content_id()}
    ids |= {rebuilt_with(sha256="b" * 64).content_id(), rebuilt_with(library="0.22.1").content_id()}
    assert len(ids) == 3
    # a version without a tokenize stage keeps the manifest (and id) it had
    plain = dataclasses.replace(recorded, lineage=LINEAGE)
    assert "tokenizer" not in plain.to_dict()["lineage"]
    assert manifest_differences(plain, recorded) == ["lineage: tokenizer: none -> used"]
