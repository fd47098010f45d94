"""The near_dedupe stage: MinHash signatures, LSH buckets and clusters (builder/near_dedupe/), and
builds with it: planted near-copies found and quarantined with their reasons, the same version
whatever the workers and partitions, incremental rebuilds, versions checked ``against``."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.near_corpus import generated, jaccard, planted, shingle_set
from datapipe.builder.config import parse_pipeline
from datapipe.builder.in_process import InProcessClient
from datapipe.builder.near_dedupe import minhash, shingles
from datapipe.builder.near_dedupe import stage as stage_module
from datapipe.builder.near_dedupe.clusters import first_of_cluster
from datapipe.builder.near_dedupe.lsh import candidate_pairs, choose_bands, s_curve
from datapipe.builder.near_dedupe.minhash import HashFamily, is_empty, signatures, similarity
from datapipe.errors import ConfigError, IntegrityError
from datapipe.versioning.rejected import read_rows

FAMILY = HashFamily(0, 112)


def test_the_estimate_follows_the_exact_jaccard_of_the_shingles():
    corpus = planted(generated(120, seed=3), per_level=8, seed=3)
    sig = signatures(corpus.texts, 5, FAMILY)
    copies = np.array([c[0] for c in corpus.copies])
    originals = np.array([c[1] for c in corpus.copies])
    exact = np.array([c[2] for c in corpus.copies])
    error = similarity(sig[copies], sig[originals]) - exact
    # 112 values: a standard error of at most 0.05 a pair
    assert np.abs(error).mean() < 0.04 and np.abs(error).max() < 0.2
    assert (similarity(sig[:60], sig[60:120]) < 0.2).all()  # unrelated documents


@pytest.mark.parametrize("on", ["in process", "cluster"])
def test_held_documents_answer_as_their_signatures_would(monkeypatch, request, on):
    from dask import delayed

    from datapipe.builder.near_dedupe import held
    from datapipe.builder.near_dedupe.resolve import numbers
    from datapipe.builder.near_dedupe.tasks import kept
    from datapipe.builder.pass_runner import PassRunner
    from datapipe.builder.progress import BuildProgress
    from datapipe.builder.removals import Signed

    client = InProcessClient(2) if on == "in process" else request.getfixturevalue("dask_client")
    rng = np.random.default_rng(5)
    sizes = [7, 0, 30, 12]
    blocks = [
        Signed(
            rng.integers(0, 4, (n, 16), dtype=np.uint32),  # values alike enough to share some
            np.array([f"b{b}r{r}" for r in range(n)], dtype=str),
        )
        for b, n in enumerate(sizes)
    ]
    blocks[2].signatures[[3, 9]] = np.uint32(2**32 - 1)  # no shingle
    run = PassRunner(client, BuildProgress(), "test")
    docs = held.HeldDocuments(run, "s", run.keep([delayed(kept)(b) for b in blocks]))
    every = np.concatenate([numbers(b, np.arange(n)) for b, n in enumerate(sizes)])
    first, second = rng.choice(every, 200), rng.choice(every, 200)  # in no order, some twice
    monkeypatch.setattr(held, "COMPARED_BYTES", 6 * 2 * 4 * 16)  # comparisons of 6 pairs
    sig = {int(d): blocks[d >> 32].signatures[d & 0xFFFFFFFF] for d in every}
    expected = similarity(np.stack([sig[d] for d in first]), np.stack([sig[d] for d in second]))
    assert np.array_equal(docs.similarity(first, second, "verify"), expected)
    assert docs.similarity(first[:0], second[:0], "verify").shape == (0,)
    assert docs.sizes == sizes
    assert docs.empty().tolist() == numbers(2, np.array([3, 9])).tolist()
    assert docs.labels(first[:5]) == [f"b{d >> 32}r{d & 0xFFFFFFFF}" for d in first[:5]]


def test_spooled_partitions_read_back_whole_from_any_thread():
    from concurrent.futures import ThreadPoolExecutor

    from datapipe.builder.near_dedupe.spool import spooled
    from datapipe.builder.removals import Signed

    rng = np.random.default_rng(1)
    parts = [
        Signed(
            rng.integers(0, 2**32, (n, 64), dtype=np.uint32), np.array([f"é{i}" for i in range(n)])
        )
        for n in (3, 0, 500, 1)
    ]
    fetched = []
    kept = spooled(parts, lambda p: fetched.append(p) or p)
    assert fetched == parts  # one at a time, in order
    with ThreadPoolExecutor(4) as pool:
        back = list(pool.map(lambda s: s.load(), [*reversed(kept), *kept]))
    for b, p in zip(back, [*reversed(parts), *parts], strict=True):
        assert np.array_equal(b.signatures, p.signatures) and b.labels.tolist() == p.labels.tolist()


def test_signatures_do_not_depend_on_how_the_shingles_are_cut(monkeypatch):
    texts = [*generated(30, seed=1), "", None, "two words", " ".join(["long"] * 50_000)]
    whole = signatures(texts, 5, FAMILY)
    monkeypatch.setattr(shingles, "CHUNK_WORDS", 100)
    monkeypatch.setattr(minhash, "VALUES", 7)
    assert np.array_equal(signatures(texts, 5, FAMILY), whole)
    assert is_empty(whole).tolist() == [False] * 30 + [True, True, False, False]
    # case, punctuation and spacing are not words
    same = signatures(["The cat, sat  on the MAT!", "the cat sat on the mat"], 3, FAMILY)
    assert np.array_equal(same[0], same[1])


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=40))
def test_clusters_keep_the_least_document_of_each_component(edges):
    pairs = np.array(edges, dtype=np.int64).reshape(-1, 2)
    members, first = first_of_cluster(pairs)
    root = {}  # the textbook union-find, least number as the root

    def find(x):
        while root.setdefault(x, x) != x:
            x = root[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        root[max(ra, rb)] = min(ra, rb)
    assert dict(zip(members.tolist(), first.tolist(), strict=True)) == {
        x: find(x) for x in {v for e in edges for v in e}
    }


def test_a_bucket_pairs_each_document_with_its_first_and_the_one_before():
    band = np.array([0, 0, 0, 0, 1, 1], dtype=np.int32)
    key = np.array([7, 7, 7, 9, 7, 7], dtype=np.uint64)
    doc = np.array([5, 2, 8, 1, 3, 2], dtype=np.int64)
    assert candidate_pairs(band, key, doc).tolist() == [[2, 3], [2, 5], [2, 8], [5, 8]]
    nothing = np.zeros(0, np.int64)
    assert candidate_pairs(nothing.astype(np.int32), nothing.astype(np.uint64), nothing).shape == (
        0,
        2,
    )


def test_default_bands_and_rows_follow_the_threshold():
    assert choose_bands(0.8, 112) == (14, 8)
    for threshold in (0.5, 0.7, 0.9):
        bands, rows = choose_bands(threshold, 112)
        assert bands * rows <= 112 and s_curve(threshold, bands, rows) >= 0.92


def stage_yaml(**args) -> str:
    return (
        "name: web\nsource: {path: raw/*.jsonl, format: jsonl}\n"
        f"stages:\n  - near_dedupe: {json.dumps(args)}\n"
        "sample: {key: id, fields: {text: text}}\n"
    )


@pytest.mark.parametrize(
    "args, words",
    [
        ({"threshold": 0}, "threshold"),
        ({"threshold": 1.5}, "threshold"),
        ({"bands": 20, "rows": 8}, "bands x rows is 20 x 8 = 160, more than the 112 hashes"),
        ({"shingles": 3}, "shingles"),
    ],
)
def test_bad_stage_settings_are_named(args, words):
    with pytest.raises(ConfigError, match=words):
        parse_pipeline(stage_yaml(**args), "pipeline.yaml")


def write_docs(project, name: str, texts: list, start: int = 0) -> None:
    rows = [json.dumps({"id": f"d{i:05d}", "text": t}) for i, t in enumerate(texts, start)]
    project.write(f"raw/{name}.jsonl", "\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def corpus():
    return planted(generated(240, seed=7), per_level=12, seed=7)


def removed(project, result) -> dict[str, str]:
    """Each quarantined row's id -> its reason."""
    m = result.manifest
    rows = read_rows(project.store, project.store.path(m.name, "versions", m.version, m.rejected))
    return {json.loads(r["data"])["id"]: r["reason"] for r in rows}


def test_planted_copies_are_removed_with_the_document_they_copy(project, corpus):
    write_docs(project, "docs", corpus.texts)
    project.pipeline(stage_yaml(threshold=0.8))
    result = project.build()
    gone = removed(project, result)
    found = {}  # exact similarity of each copy -> removed or not
    for copy, original, exact, _ in corpus.copies:
        key = f"d{copy:05d}"
        found[exact] = key in gone
        if key in gone:
            assert gone[key].startswith(f"near-duplicate of d{original:05d} (estimated similarity")
            assert exact >= 0.7  # precision: nothing removed under threshold - 0.1

    def recall(lo: float, hi: float = 1.0) -> float:
        return float(np.mean([g for exact, g in found.items() if lo <= exact <= hi]))

    # an estimate from 112 values: sure at 0.9 and above, a coin toss right at the threshold
    assert recall(0.9) >= 0.95 and recall(0.84, 0.9) >= 0.85 and recall(0, 0.6) == 0
    (near,) = [s for s in result.manifest.stages if s.stage == "stages[0].near_dedupe"]
    assert near.rejected == len(gone) and near.rows_out == len(corpus.texts) - len(gone)
    assert result.manifest.samples == near.rows_out  # far over max_rejected, still built


def test_every_removed_document_is_near_its_kept_one(project, corpus):
    write_docs(project, "docs", corpus.texts)
    project.pipeline(stage_yaml(threshold=0.7))
    gone = removed(project, project.build())
    index = {f"d{i:05d}": i for i in range(len(corpus.texts))}
    for key, reason in gone.items():
        kept = reason.split()[2]
        exact = jaccard(
            shingle_set(corpus.texts[index[key]], 5), shingle_set(corpus.texts[index[kept]], 5)
        )
        assert index[kept] < index[key] and exact >= 0.6, (key, reason, exact)


def test_same_version_for_any_workers_and_partitions(project, corpus, dask_client):
    for i in range(4):  # copies in other files than their originals
        write_docs(project, f"docs-{i}", corpus.texts[i::4], start=10_000 * i)
    versions = set()
    one = InProcessClient(threads=1)  # one worker, in this process
    two = InProcessClient(threads=2)
    for blocksize, client in [("1MB", one), ("8KB", two), ("8KB", one), ("8KB", dask_client)]:
        text = stage_yaml().replace(
            "format: jsonl}", f"format: jsonl, options: {{blocksize: {blocksize}}}}}"
        )
        project.pipeline(text)
        result = project.build(client=client)
        versions.add(result.manifest.version)
    assert len(versions) == 1
    assert result.manifest.stages[1].rejected > 20


def test_a_rebuild_signs_only_new_partitions_and_matches_a_fresh_build(
    project, corpus, monkeypatch, tmp_path
):
    signed = []
    real = stage_module.signature_pass

    def counting(job, part, masks, stage):
        signed.append(part.number)
        return real(job, part, masks, stage)

    monkeypatch.setattr(stage_module, "signature_pass", counting)
    texts = corpus.texts
    write_docs(project, "b", texts[:200], start=0)
    write_docs(project, "d", texts[200:260], start=200)
    project.pipeline(stage_yaml())
    project.build()
    first = len(signed)
    # a new file before both in source order: its documents are the originals of later copies
    write_docs(project, "a", texts[260:], start=260)
    write_docs(project, "c", [texts[0], texts[1] + " extra words here"], start=900)
    rebuilt = project.build()
    assert len(signed) - first == 2  # the two new files' partitions only
    fresh = type(project)(tmp_path / "fresh")
    for name in "abcd":
        fresh.write(f"raw/{name}.jsonl", (project.root / "raw" / f"{name}.jsonl").read_text())
    fresh.pipeline(stage_yaml())
    again = fresh.build()
    assert again.manifest.version == rebuilt.manifest.version
    gone = removed(project, rebuilt)
    assert "d00900" in gone and "d00000" not in gone  # an old document is the first of a new one

    # a rebuild's client leaves its parent's signatures in the parent's state file; a task reads
    # them
    from datapipe.builder.incremental import InState
    from datapipe.builder.reuse import read_parent

    parent = read_parent(project.store, rebuilt.manifest.name, "any key")
    held = list(parent.state.dedupe[0].values())
    assert held and all(isinstance(h, InState) for h in held)
    assert sum(len(h.load()) for h in held) == rebuilt.manifest.stages[1].rows_in
    os.remove(held[0].path)
    with pytest.raises(IntegrityError, match="build state"):
        held[0].load()


def test_empty_texts_are_kept_unless_asked(project):
    texts = ["", "  ", "some words here and there", "", "!!!"]  # (a null: no words either)
    write_docs(project, "docs", texts)
    project.pipeline(stage_yaml())
    assert project.build().manifest.samples == 5
    project.pipeline(stage_yaml(empty="first"))
    gone = removed(project, project.build())
    assert sorted(gone) == ["d00001", "d00003", "d00004"]
    assert gone["d00003"] == "near-duplicate of d00000 (estimated similarity 1.00)"


def checked_against(project, corpus, evalset_stages: str):
    """A build of copies of the first 240 documents' planted copies (and 20 new documents) checked
    against a version of those 240 built with ``evalset_stages``: the version, its label, the
    build and its removals."""
    write_docs(project, "docs", corpus.texts[:240])
    project.pipeline(
        stage_yaml().replace("name: web", "name: evalset").split("stages:")[0]
        + f"stages:\n{evalset_stages}sample: {{key: id, fields: {{text: text}}}}\n"
    )
    evalset = project.build()
    project.write("raw/docs.jsonl", "")
    copies = [c for c in corpus.copies if c[3] >= 0.9]
    write_docs(project, "docs", [corpus.texts[c[0]] for c in copies] + generated(20, seed=99))
    url = f"{project.store.url}/evalset"
    project.pipeline(stage_yaml(against=[url]))
    result = project.build()
    gone = removed(project, result)
    label = f"{url}@{evalset.manifest.version[:12]}"
    assert len(gone) >= len(copies) - 1
    assert all(reason.startswith(f"near-duplicate of {label}#d") for reason in gone.values())
    assert not any(f"d{i:05d}" in gone for i in range(len(copies), len(copies) + 20))
    return label, result, gone


SIGNED_FROM_SHARDS = "signed from its shards with shingle 5, 112 hashes, seed 0"


def test_a_version_checked_against_gives_its_signatures_from_its_build_state(
    project, corpus, monkeypatch
):
    def unread(*args):
        raise AssertionError("a shard was signed again")

    monkeypatch.setattr("datapipe.builder.near_dedupe.stage.against_task", unread)
    stages = "  - near_dedupe: {field: text, threshold: 0.99}\n  - dropna: {columns: [text]}\n"
    label, result, _ = checked_against(project, corpus, stages)
    assert result.notes == (
        f"stages[0].near_dedupe: checked against {label} (240 documents, signatures from its "
        "build state)",
    )
    # the client names the version's documents from the state's labels; tasks read the signatures
    from datapipe.builder.config import load_pipeline
    from datapipe.builder.near_dedupe.against import against_blocks
    from datapipe.builder.near_dedupe.against_state import FromState

    args = load_pipeline(project.root / "pipeline.yaml").pipeline.stages[0].args
    blocks = against_blocks("stages[0].near_dedupe", args, project.store).blocks
    assert blocks and all(isinstance(b, FromState) for b in blocks)
    assert sum(len(b.rows) for b in blocks) == 240
    assert all(b.load().labels[0].startswith(f"{label}#d") for b in blocks)


@pytest.mark.parametrize(
    "stages, why",
    [
        ("  - dropna: {columns: [text]}\n", "its pipeline has no near_dedupe stage on 'text'"),
        (
            "  - near_dedupe: {field: text, shingle: 3, seed: 1}\n",
            "its near_dedupe stage signed with shingle 3, seed 1",
        ),
        (
            "  - near_dedupe: {field: text}\n  - fillna: {values: {text: none}}\n",
            "a stage after its near_dedupe stage may change 'text'",
        ),
    ],
)
def test_a_version_checked_against_is_signed_from_its_shards_where_its_state_differs(
    project, corpus, stages, why
):
    label, result, gone = checked_against(project, corpus, stages)
    assert result.notes == (
        f"stages[0].near_dedupe: checked against {label} (240 documents, {SIGNED_FROM_SHARDS}: "
        f"{why})",
    )


def test_state_and_shards_give_the_same_removals(project, corpus, monkeypatch):
    stages = "  - near_dedupe: {field: text, threshold: 0.99}\n"
    from_state = checked_against(project, corpus, stages)[2]
    monkeypatch.setattr(
        "datapipe.builder.near_dedupe.against.signed_from_state", lambda *a: ([], "asked")
    )
    assert checked_against(project, corpus, stages)[2] == from_state


@pytest.mark.parametrize(
    "against, words",
    [
        (
            "store/nothing",
            "stages\\[0\\].near_dedupe.against\\[0\\]: 'STORE/nothing' cannot be read",
        ),
        ("store/web", "has no field 'body'"),
    ],
)
def test_against_a_missing_version_or_field_is_named(project, against, words):
    write_docs(project, "docs", ["one two three four five"])
    project.pipeline(stage_yaml())
    project.build()
    url = against.replace("store", project.store.url)
    words = words.replace("STORE", project.store.url)
    project.pipeline(
        stage_yaml(against=[url], field="body").replace("{text: text}", "{text: body}")
    )
    project.write("raw/docs.jsonl", json.dumps({"id": "x", "body": "one two"}) + "\n")
    with pytest.raises(ConfigError, match=words):
        project.build()


def test_without_verify_every_candidate_pair_is_a_duplicate(project, corpus):
    write_docs(project, "docs", corpus.texts)
    project.pipeline(stage_yaml())
    checked = removed(project, project.build())
    project.pipeline(stage_yaml(verify=False))
    loose = removed(project, project.build())
    assert set(checked) < set(loose)  # every checked removal, and more
    near_below = [f"d{c:05d}" for c, _, exact, _ in corpus.copies if 0.6 <= exact < 0.78]
    assert sum(k in loose for k in near_below) > sum(k in checked for k in near_below)
