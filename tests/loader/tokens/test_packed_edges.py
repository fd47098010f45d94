"""Packed rows at the edges (rows of 2 tokens, documents of 0, 1, L, L + 1 and 2L tokens, windows
of no rows, one shard or many) against a reference made from the documents alone."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest
from helpers.versions import commit_tokens
from hypothesis import given, settings
from hypothesis import strategies as st

import datapipe
from datapipe.errors import ConfigError
from datapipe.formats.base import KEY
from datapipe.loader.audit import audit
from datapipe.loader.tokens.packed_set import packed
from datapipe.versioning.store import Store

IGNORE = -100
SETTINGS = [
    (mode, documents, long)
    for mode in ("concat", "best-fit", "pad")
    for documents in ("separate", "joined")
    for long in ("split", "truncate")
    if not (mode == "concat" and long == "truncate")
]


def version(root, lengths: list[list[int]], name: str = "toks") -> tuple[str, list[list[tuple]]]:
    """A token version of shards of documents of ``lengths`` tokens (each its own id range), and
    its shards as (key, ids) lists."""
    shards, k = [], 0
    for shard in lengths:
        docs = []
        for n in shard:
            ids = (np.arange(n) + 100 * k + 1) % 65_000
            docs.append({KEY: f"d{k:05d}", "tokens": ids.astype(np.uint16), "url": b"u"})
            k += 1
        shards.append(docs)
    commit_tokens(Store(str(root)), shards, name=name)
    return f"{root}/{name}", [[(d[KEY], d["tokens"].astype(np.int64)) for d in s] for s in shards]


def concat_reference(docs: list[tuple], size: int, documents: str) -> list[dict]:
    """A window's concat rows: stream tokens [r L, (r + 1) L), labels the next stream token."""
    stream = np.concatenate([ids for _, ids in docs] + [np.zeros(0, np.int64)])
    bounds = np.cumsum([0] + [len(ids) for _, ids in docs]).tolist()
    rows = []
    for lo in range(0, max(0, (len(stream) - 1) // size) * size, size):
        labels = stream[lo + 1 : lo + size + 1].copy()
        if documents == "separate":  # no label across a document's end
            labels[[b - lo - 1 for b in bounds if lo < b <= lo + size]] = IGNORE
        pieces = [
            (k, max(s, lo) - s, min(e, lo + size) - s)
            for (k, _), s, e in zip(docs, bounds[:-1], bounds[1:], strict=True)
            if max(s, lo) < min(e, lo + size)
        ]
        rows.append({"ids": stream[lo : lo + size], "labels": labels, "pieces": pieces})
    return rows


def fitted_pieces(docs: list[tuple], size: int, mode: str, long: str) -> list[list[tuple]]:
    """A window's padded rows as (key, first, end) pieces: pad puts a piece a row, best-fit is the
    textbook loop (largest first, each into the fullest row it fits, the first of equals)."""
    pieces = [
        (k, first, min(first + size, len(ids)))
        for k, ids in docs
        for first in range(0, len(ids), size)[: 1 if long == "truncate" else None]
    ]
    if mode == "pad":
        return [[p] for p in pieces]
    rows: list[list[tuple]] = []
    for p in sorted(pieces, key=lambda p: p[1] - p[2]):  # stable: equals keep their order
        room = [size - sum(e - f for _, f, e in r) for r in rows]
        fits = [i for i, r in enumerate(room) if r >= p[2] - p[1]]
        if fits:
            rows[min(fits, key=lambda i: (room[i], i))].append(p)
        else:
            rows.append([p])
    return rows


def padded_row(pieces: list[tuple], ids_of: dict, size: int, documents: str) -> dict:
    """A padded row from its pieces: labels the next token of the document (joined: of the row),
    -100 past a document's end and on the padding (id 0: the version has no end-of-text id)."""
    ids, labels = np.zeros(size, np.int64), np.full(size, IGNORE, np.int64)
    column = 0
    for i, (k, first, end) in enumerate(pieces):
        doc, n = ids_of[k], end - first
        ids[column : column + n] = doc[first:end]
        labels[column : column + n - 1] = doc[first + 1 : end]
        if documents == "joined" and i + 1 < len(pieces):
            labels[column + n - 1] = ids_of[pieces[i + 1][0]][pieces[i + 1][1]]
        elif end < len(doc):
            labels[column + n - 1] = doc[end]
        column += n
    return {"ids": ids, "labels": labels, "pieces": pieces}


def reference(shards, size, mode, documents, long, block) -> list[dict]:
    """Every row, unshuffled: windows in order, each window's rows in order."""
    rows = []
    for w in range(0, len(shards), block):
        docs = [d for shard in shards[w : w + block] for d in shard]
        if mode == "concat":
            rows.extend(concat_reference(docs, size, documents))
            continue
        ids_of = dict(docs)
        for pieces in fitted_pieces(docs, size, mode, long):
            rows.append(padded_row(pieces, ids_of, size, documents))
    for row in rows:  # positions and attention segments follow from the pieces
        used = [e - f for _, f, e in row["pieces"]]
        pad, joined = size - sum(used), documents == "joined"
        row["segments"] = ([sum(used)] if joined else used) + [pad] * (pad > 0)
        row["positions"] = np.concatenate([np.arange(n) for n in row["segments"]])
        if joined:
            row["positions"] = np.arange(size)
    return rows


def delivered(url, pack, batch_size=1, **options) -> list[dict]:
    """Every row an unshuffled epoch delivers, checked batch by batch for its segments (none
    where the version packs into no row: the Loader refuses it, saying so)."""
    try:
        loader = datapipe.Loader(
            url, batch_size=batch_size, pack=pack, shuffle=False, num_workers=0, **options
        )
    except ConfigError as e:
        assert "packs into no row" in str(e)
        return []
    rows = []
    for batch in loader:
        cu = np.asarray(batch["cu_seqlens"])
        assert cu[0] == 0 and cu[-1] == batch_size * pack.length
        assert batch["max_seqlen"] == int(np.diff(cu).max())
        segments = np.diff(cu).tolist()
        for r, pieces in enumerate(batch["__key__"]):
            row = {f: np.asarray(batch[f][r]) for f in ("input_ids", "labels", "position_ids")}
            row["pieces"] = [(k, f, e) for _, k, f, e in pieces]
            rows.append(row)
        rows[-batch_size]["batch_segments"] = segments
    return rows


def assert_rows(got: list[dict], want: list[dict], batch_size: int = 1) -> None:
    """``got`` (delivered, the drop_last tail left out) against the reference ``want``."""
    assert len(got) == len(want) // batch_size * batch_size
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        assert g["pieces"] == w["pieces"], i
        np.testing.assert_array_equal(g["input_ids"], w["ids"], err_msg=f"row {i}")
        np.testing.assert_array_equal(g["labels"], w["labels"], err_msg=f"row {i}")
        np.testing.assert_array_equal(g["position_ids"], w["positions"], err_msg=f"row {i}")
        if "batch_segments" in g:
            batch = want[i : i + batch_size]
            assert g["batch_segments"] == [s for row in batch for s in row["segments"]], i


@pytest.mark.parametrize(("mode", "documents", "long"), SETTINGS)
def test_documents_of_no_tokens_make_no_piece(tmp_path, mode, documents, long):
    # min_tokens: 0 with eos: false keeps an empty text as a document of no tokens
    url, shards = version(tmp_path, [[3, 0, 4], [0, 2]])
    pack = datapipe.pack(4, mode, documents, long)
    assert_rows(delivered(url, pack), reference(shards, 4, mode, documents, long, 4))


@st.composite
def layouts(draw) -> tuple[int, list[list[int]]]:
    """A row length and shards of documents of edge lengths (0, 1, L - 1, L, L + 1, 2L, ...)."""
    size = draw(st.sampled_from([2, 3, 4, 5, 8]))
    edge = st.sampled_from([0, 1, 2, size - 1, size, size + 1, 2 * size, 2 * size + 1, 3 * size])
    shards = draw(st.lists(st.lists(edge, min_size=1, max_size=4), min_size=1, max_size=5))
    return size, [shard if sum(shard) else [1, *shard[1:]] for shard in shards]  # no empty .bin


@settings(max_examples=25)
@given(
    layouts(),
    st.sampled_from(SETTINGS),
    st.sampled_from([1, 3]),
    st.sampled_from([1, 3]),
)
def test_every_row_is_the_references(layout, setting, block, batch_size):
    size, lengths = layout
    with tempfile.TemporaryDirectory() as root:
        url, shards = version(root, lengths)
        pack = datapipe.pack(size, *setting)
        got = delivered(url, pack, batch_size, block_shards=block)
    assert_rows(got, reference(shards, size, *setting, block), batch_size)


@pytest.mark.parametrize(
    ("long", "length", "kind"), [("truncate", 20, "cut"), ("split", 8, "whole")]
)
def test_the_audit_counts_a_document_a_mix_delivers_twice_once(tmp_path, long, length, kind):
    big, _ = version(tmp_path / "a", [[8, 8, 8, 8]])
    small, _ = version(tmp_path / "b", [[length]])  # a row of its own, read twice an epoch
    mixed = datapipe.mix({"a": big, "b": small}, weights={"a": 0.5, "b": 0.5})
    rows = packed(mixed, datapipe.pack(16, "pad", long=long), 0, True, 4)
    report = audit(rows, batch_size=1, world_size=1)
    assert report.ok, report.violations
    tokens = report.epochs[0].tokens
    assert tokens["rows"] == 5 and tokens["tokens"] == 3 * 8 + 2 * min(length, 16)
    documents = {"whole": 3, "split": 0, "cut": 0, "never": 1}  # a: 3 rows of its 4 documents
    documents[kind] += 1  # b's document, delivered twice, is still one document
    assert tokens["documents"] == documents
