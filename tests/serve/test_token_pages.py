"""`datapipe serve` of a token version: each document as its text, decoded by the version's own
tokenizer, with its token count; its ids where tokenizers is not installed."""

from __future__ import annotations

import html
import sys

import pytest
from helpers.text import build_web, documents, expected_ids, train_tokenizer

from datapipe.versioning.store import Store


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    """A token version of 40 documents, then the pipeline's tokenizer file replaced by another."""
    root = tmp_path_factory.mktemp("serve-tokens")
    docs = [d for d in documents(40, seed=2) if d]
    m = build_web(root, docs, bos=True)
    # the version decodes with the copy it keeps, not with the file the pipeline names now
    train_tokenizer(root / "tokenizers" / "bpe.json", vocab_size=300, specials=("<x>", "<y>"))
    return root, m, docs


@pytest.fixture
def client(web):
    from starlette.testclient import TestClient

    from datapipe.serve import create_app

    with TestClient(create_app(Store(str(web[0] / "store")))) as c:
        yield c


def shown(page: str) -> str:
    return html.unescape(page)


def test_a_document_page_shows_its_text_and_token_count(web, client):
    root, m, docs = web
    kept = root / "store" / "web" / "versions" / m.version / "tokenizer.json"
    ids = expected_ids(kept, docs[0], bos=True)
    page = client.get(f"/d/web/v/{m.version}/s/0/0")
    assert page.status_code == 200
    assert f"<small>text, {len(ids)} tokens, {2 * len(ids)} B</small>" in page.text
    assert f'<pre class="text"><s>{docs[0]}<|endoftext|></pre>' in shown(page.text)
    # the grid: each document's start, and its token count
    grid = shown(client.get(f"/d/web/v/{m.version}/samples").text)
    assert f'<span class="name">tokens ({len(ids)})</span> <s>{docs[0][:40]}' in grid


def test_a_long_document_is_cut_with_its_full_count(web, client):
    root, m, docs = web
    long = next(i for i, d in enumerate(docs) if len(d) > 5000)
    entry = next(
        (s, r)
        for s, shard in enumerate(m.shards)
        for r in range(shard.samples)
        if client.get(f"/d/web/v/{m.version}/s/{s}/{r}").text.count(f"example.org/{long}<") == 1
    )
    page = client.get(f"/d/web/v/{m.version}/s/{entry[0]}/{entry[1]}")
    kept = root / "store" / "web" / "versions" / m.version / "tokenizer.json"
    ids = expected_ids(kept, docs[long], bos=True)
    assert f"text, {len(ids)} tokens, " in page.text and "cut: " in page.text


def test_without_tokenizers_the_ids_are_shown_and_it_says_what_to_install(web, client, monkeypatch):
    root, m, docs = web
    kept = root / "store" / "web" / "versions" / m.version / "tokenizer.json"
    ids = expected_ids(kept, docs[0], bos=True)
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers raises ImportError
    page = client.get(f"/d/web/v/{m.version}/s/0/0")
    assert page.status_code == 200
    assert f"<small>ids, {len(ids)} tokens, " in page.text
    assert f'<pre class="ids">{" ".join(map(str, ids))}</pre>' in page.text
    assert "install tokenizers (pip install &#39;datapipe[text]&#39;) to see the text" in page.text


def test_the_diff_page_shows_both_sides_of_a_changed_document_as_text(tmp_path):
    from starlette.testclient import TestClient

    from datapipe.serve import create_app

    docs = [d for d in documents(30, seed=4) if d]
    first = build_web(tmp_path, docs)
    second = build_web(tmp_path, [docs[0] + " café", *docs[1:]])
    with TestClient(create_app(Store(str(tmp_path / "store")))) as client:
        page = client.get(f"/d/web/diff?a={first.version}&b={second.version}")
    assert page.status_code == 200 and "~1 changed" in page.text
    text = shown(page.text)
    for version, body in ((first, docs[0]), (second, docs[0] + " café")):
        tokens = len(expected_ids(tmp_path / "tokenizers" / "bpe.json", body))
        assert f'<span class="name">tokens ({tokens})</span> {body[:40]}' in text, version


def test_token_shards_without_a_tokenizer_show_their_ids_from_any_store():
    from helpers.versions import commit_tokens, token_samples
    from starlette.testclient import TestClient

    from datapipe.serve import create_app

    store = Store("memory://serve-tokens")
    m = commit_tokens(store, [token_samples(0), token_samples(1)])
    document = token_samples(1)[3]
    with TestClient(create_app(store)) as client:
        page = client.get(f"/d/toks/v/{m.version}/s/1/3")
    ids = document["tokens"].tolist()
    assert page.status_code == 200 and f'<h1 class="key">{document["__key__"]}</h1>' in page.text
    assert f"<small>ids, {len(ids)} tokens, {2 * len(ids)} B</small>" in page.text
    assert f'<pre class="ids">{" ".join(map(str, ids))}</pre>' in page.text
    assert "no tokenizer recorded with this version: its ids" in page.text
    assert f'<pre class="text">{document["url"].decode()}</pre>' in page.text
