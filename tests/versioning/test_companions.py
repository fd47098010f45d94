"""Versions of shards with companion files (token shards: NAME.idx, NAME.docs): recorded in the
manifest, committed with their shard, verified, on local disk and memory://."""

from __future__ import annotations

import hashlib
import json

import jsonschema
import pytest
from conftest import SCHEMA, commit, two_shards
from helpers.versions import commit_token_child, commit_tokens, token_samples

from datapipe.errors import IntegrityError
from datapipe.versioning.gc import collect
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.sizes import usage
from datapipe.versioning.verify import verify_version

FILES = ("shard-000000.bin", "shard-000000.bin.idx", "shard-000000.docs", "shard-000000.idx")


def _files(store, name, version) -> dict[str, bytes]:
    root = store.path(name, "versions", version)
    return {p.rsplit("/", 1)[-1]: store.fs.cat_file(p) for p in store.fs.find(root)}


def test_a_token_version_records_its_companions_and_holds_them(store):
    m = commit_tokens(store, [token_samples(0), token_samples(1)])
    assert m.format_version == 3 and m.samples == 20
    files = _files(store, "toks", m.version)
    assert sorted(files) == sorted(["manifest.json", *FILES, *_renamed(FILES)])
    for shard in m.shards:
        assert [c.suffix for c in shard.companions] == [".idx", ".docs"]
        for companion, filename in shard.companion_names():
            data = files[filename]
            assert (companion.bytes, companion.sha256) == (
                len(data),
                hashlib.sha256(data).hexdigest(),
            )
    # a shard weighs its file and its companions (its index aside)
    data_files = [f for f in files if not f.endswith((".bin.idx", ".json"))]
    assert m.bytes == sum(len(files[f]) for f in data_files)
    raw = json.loads(files["manifest.json"])
    jsonschema.validate(raw, SCHEMA)
    assert Manifest.from_json(files["manifest.json"], "m") == m
    assert verify_version(store, "toks", m) == []


def test_a_version_without_companions_keeps_format_2_and_its_json(store):
    m = commit(store, two_shards())
    assert m.format_version == 2 and all(s.companions == () for s in m.shards)
    assert b"companions" not in m.to_json()


@pytest.mark.parametrize("suffix", [".idx", ".docs"])
def test_verify_names_a_changed_or_missing_companion(store, suffix):
    m = commit_tokens(store, [token_samples(0), token_samples(1)])
    root = store.path("toks", "versions", m.version)
    changed, missing = f"{root}/shard-000001{suffix}", f"{root}/shard-000000{suffix}"
    data = bytearray(store.fs.cat_file(changed))
    data[len(data) // 2] ^= 1
    store.fs.pipe_file(changed, bytes(data))
    store.fs.rm_file(missing)
    problems = sorted(str(p) for p in verify_version(store, "toks", m))
    assert problems == [f"mismatch: {changed} (sha256 differs)", f"missing: {missing}"]


def test_a_reused_shard_brings_its_companions_and_gc_keeps_them_while_listed(store):
    parent = commit_tokens(store, [token_samples(0), token_samples(1)])
    child = commit_token_child(store, parent, new=1)
    assert [s.companions for s in child.shards[1:]] == [s.companions for s in parent.shards]
    assert verify_version(store, "toks", child) == []
    u = usage(store, "toks")
    assert u["shared_bytes"] == parent.bytes and u["own_bytes"] == child.shards[0].data_bytes
    collect(store, "toks", keep_last=1)
    assert store.versions("toks") == [child.version]
    assert verify_version(store, "toks", child) == []
    # locally the child holds links of its own; on memory:// the files it shares stay
    shared = child.shards[1].stored_in is not None
    assert sorted(_files(store, "toks", parent.version)) == (
        sorted(["pruned.json", *FILES, *_renamed(FILES)]) if shared else []
    )


def test_a_token_version_counts_its_documents_and_tokens_per_shard_and_in_all(store):
    docs = [token_samples(0), token_samples(1)]
    m = commit_tokens(store, docs)
    counts = [sum(len(d["tokens"]) for d in shard) for shard in docs]
    assert [(s.samples, s.tokens) for s in m.shards] == [(10, counts[0]), (10, counts[1])]
    assert m.tokens == sum(counts)
    raw = json.loads(m.to_json())
    assert raw["tokens"] == sum(counts) and [s["tokens"] for s in raw["shards"]] == counts
    jsonschema.validate(raw, SCHEMA)
    # a reused shard keeps its count; the child adds its new shard's
    child = commit_token_child(store, m, new=1)
    assert [s.tokens for s in child.shards[1:]] == counts
    assert child.tokens == sum(s.tokens for s in child.shards)
    # the total is checked against the shards when read
    raw["tokens"] += 1
    with pytest.raises(IntegrityError, match="field 'tokens' is .* but the shards add up to"):
        Manifest.from_json(json.dumps(raw).encode(), "m.json")


def test_a_version_of_other_samples_has_no_token_counts(store):
    m = commit(store, two_shards())
    assert m.tokens is None and all(s.tokens is None for s in m.shards)
    assert b'"tokens"' not in m.to_json()


def _renamed(names) -> list[str]:
    return [f.replace("000000", "000001") for f in names]


def test_companions_in_a_format_2_manifest_are_a_clear_error():
    m = Manifest(
        name="toks",
        shard_format="tokens",
        fields={},
        shards=(_entry_with_companion(),),
    ).in_written_format()
    raw = json.loads(m.with_id().to_json())
    assert raw["format_version"] == 3
    Manifest.from_json(json.dumps(raw).encode(), "m.json")
    raw["format_version"] = 2
    with pytest.raises(IntegrityError, match=r"'shards\[0\].companions' needs manifest format 3"):
        Manifest.from_json(json.dumps(raw).encode(), "m.json")


@pytest.mark.parametrize("suffix", ["idx", ".", "./x", ".a/b"])
def test_a_companion_suffix_is_a_file_suffix(suffix):
    raw = json.loads(
        Manifest(name="t", shard_format="tokens", fields={}, shards=(_entry_with_companion(),))
        .in_written_format()
        .with_id()
        .to_json()
    )
    raw["shards"][0]["companions"][0]["suffix"] = suffix
    with pytest.raises(IntegrityError, match=r"companions\[0\]\.suffix': expected a file suffix"):
        Manifest.from_json(json.dumps(raw).encode(), "m.json")


def _entry_with_companion():
    from datapipe.versioning.manifest_parts import Companion, ShardEntry

    return ShardEntry(
        path="shard-000000.bin",
        samples=1,
        bytes=10,
        sha256="b" * 64,
        index_path="shard-000000.bin.idx",
        index_bytes=5,
        index_sha256="c" * 64,
        companions=(Companion(".idx", 7, "d" * 64),),
    )


def test_the_manifest_names_companions_as_their_format_writes_them():
    from datapipe.formats.registry import FORMATS
    from datapipe.versioning.manifest_parts import companion_name

    for fmt in FORMATS.values():
        for ext in fmt.extensions:
            for suffix in fmt.companions:
                shard = f"train-000012{ext}"
                assert fmt.companion_path(shard, suffix) == companion_name(shard, suffix)
    assert companion_name("shard-000003.bin", ".docs") == "shard-000003.docs"
