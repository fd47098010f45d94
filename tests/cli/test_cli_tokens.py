"""`datapipe info|diff|log` of token versions: documents, tokens, the tokenizer and lengths."""

from __future__ import annotations

import json
import math

import pytest
from helpers.cli import datapipe_in_process
from helpers.text import build_web, documents, expected_ids
from helpers.versions import commit_first, commit_sharing, commit_tokens, token_samples

from datapipe.versioning.store import Store


@pytest.fixture
def web(tmp_path):
    """A token version of 120 documents in tmp_path/store/web; its manifest and documents."""
    docs = [d for d in documents(120) if d]  # no empty document: every one is kept
    return build_web(tmp_path, docs), docs


def nearest_rank(values: list[int], p: int) -> int:
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)), 1) - 1]


def test_info_shows_documents_tokens_ids_and_lengths_from_the_idx_alone(tmp_path, web):
    m, docs = web
    bpe = tmp_path / "tokenizers" / "bpe.json"
    lengths = [len(expected_ids(bpe, d)) for d in docs]
    t = m.lineage.tokenizer
    assert m.samples == len(docs) and m.tokens == sum(lengths) and len(m.shards) > 2
    # info reads each shard's .idx, never its token ids
    for path in (tmp_path / "store" / "web" / "versions" / m.version).glob("*.bin"):
        path.unlink()
    out = datapipe_in_process("info", "store/web", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (
        f"  tokens: {sum(lengths)} in {len(docs)} documents, uint16 ids (vocab_size "
        f"{t.vocab_size}, eos_id {t.eos_id}, bos_id -), tokenizer sha256 {t.sha256[:12]} "
        f"(tokenizers {t.library})\n"
    ) in out.stdout
    dist = {"min": min(lengths), **{f"p{p}": nearest_rank(lengths, p) for p in (50, 90, 99)}}
    dist["max"] = max(lengths)
    shown = ", ".join(f"{k} {v}" for k, v in dist.items())
    assert f"  document lengths in tokens: {shown}\n" in out.stdout

    out = datapipe_in_process("info", "store/web", "--json", cwd=tmp_path)
    assert json.loads(out.stdout)["tokens"] == {
        "documents": len(docs),
        "tokens": sum(lengths),
        "dtype": "uint16",
        "vocab_size": t.vocab_size,
        "eos_id": t.eos_id,
        "bos_id": None,
        "tokenizer_sha256": t.sha256,
        "tokenizer_library": t.library,
        "lengths": dist,
    }


def test_info_of_token_shards_without_a_tokenizer_and_of_other_samples(tmp_path):
    store = Store(str(tmp_path / "store"))
    docs = token_samples(0) + token_samples(1)
    commit_tokens(store, [docs[:10], docs[10:]])
    out = datapipe_in_process("info", "store/toks", cwd=tmp_path)
    lengths = sorted(len(d["tokens"]) for d in docs)
    assert f"  tokens: {sum(lengths)} in 20 documents, uint16 ids (vocab_size -, eos_id -, " in (
        out.stdout
    )
    assert "no tokenizer recorded\n" in out.stdout
    assert f"document lengths in tokens: min {lengths[0]}, p50 {lengths[9]}, " in out.stdout
    commit_first(store)
    out = datapipe_in_process("info", "store/toy", "--json", cwd=tmp_path)
    assert "tokens" not in json.loads(out.stdout)
    assert "tokens" not in datapipe_in_process("info", "store/toy", cwd=tmp_path).stdout


def test_diff_and_log_count_documents_and_tokens_added_and_removed(tmp_path):
    docs = [d for d in documents(100, seed=3) if d]
    first = build_web(tmp_path, docs[:80])
    # d00000..d00019 go, d00080.. come, d00020 changes
    new = [docs[20] + " café", *docs[21:]]
    second = build_web(tmp_path, new, start=20)
    bpe = tmp_path / "tokenizers" / "bpe.json"

    def tokens(texts):
        return sum(len(expected_ids(bpe, t)) for t in texts)

    added, removed = tokens(new[:1] + docs[80:]), tokens(docs[:21])
    assert second.tokens == first.tokens + added - removed
    counts = (len(docs) - 80, 20, added, removed)

    out = datapipe_in_process("diff", "store/web@" + first.version, "store/web", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f": {counts[0]} added, 20 removed, 1 changed, 59 unchanged\n" in out.stdout
    assert (
        f"\n  documents: {counts[0]} added, 20 removed; tokens: {added} added, {removed} removed\n"
    ) in out.stdout
    out = datapipe_in_process(
        "diff", "store/web@" + first.version, "store/web", "--json", cwd=tmp_path
    )
    assert json.loads(out.stdout)["tokens"] == {
        "documents_added": counts[0],
        "documents_removed": 20,
        "tokens_added": added,
        "tokens_removed": removed,
    }

    out = datapipe_in_process("log", "store/web", cwd=tmp_path)
    assert f"  documents: {counts[0]} added, 20 removed, 1 changed, 59 unchanged\n" in out.stdout
    assert f"  tokens: {added} added, {removed} removed\n" in out.stdout
    entry = json.loads(datapipe_in_process("log", "store/web", "--json", cwd=tmp_path).stdout)[0]
    assert entry["parent"] == first.version
    assert (entry["changes"]["tokens_added"], entry["changes"]["tokens_removed"]) == (
        added,
        removed,
    )


def test_diff_and_log_of_other_samples_say_nothing_of_tokens(tmp_path):
    store = Store(str(tmp_path / "store"))
    first = commit_first(store)
    commit_sharing(store, first, {1: 5})
    out = datapipe_in_process("diff", f"store/toy@{first.version}", "store/toy", cwd=tmp_path)
    assert "tokens" not in out.stdout and "documents" not in out.stdout
    out = datapipe_in_process("log", "store/toy", cwd=tmp_path)
    assert "  samples: 0 added, 0 removed, 10 changed, 20 unchanged\n" in out.stdout
    assert "tokens" not in out.stdout
