"""Packed rows of token versions: every mode's rows against the documents' own tokens, the
coverage of an epoch, and the loader's guarantees (world, workers, resumption) on rows."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from helpers.versions import commit_tokens

import datapipe
from datapipe.errors import ConfigError
from datapipe.formats.base import KEY
from datapipe.loader.dataset import open_dataset
from datapipe.loader.tokens.window import concat_rows
from datapipe.versioning.store import Store

MODES = [
    (mode, documents, long)
    for mode in ("concat", "best-fit", "pad")
    for documents in ("separate", "joined")
    for long in ("split", "truncate")
    if not (mode == "concat" and long == "truncate")
]


def token_shards(seed: int = 0, shards: int = 6, longest: int = 70) -> list[list[dict]]:
    """Shards of 2 to 12 documents of 1 to ``longest`` ids; a document's ids are its own range, so
    a misplaced token shows."""
    rng = np.random.default_rng(seed)
    out, k = [], 0
    for _ in range(shards):
        docs = []
        for _ in range(int(rng.integers(2, 13))):
            n = int(rng.integers(1, longest + 1))
            ids = (np.arange(n) + 100 * k) % 65_000
            docs.append({KEY: f"d{k:05d}", "tokens": ids.astype(np.uint16), "url": b"u"})
            k += 1
        out.append(docs)
    return out


@pytest.fixture
def toks(tmp_path) -> str:
    commit_tokens(Store(str(tmp_path / "store")), token_shards())
    return str(tmp_path / "store" / "toks")


def read_documents(url: str) -> dict[str, np.ndarray]:
    with open_dataset(url) as ds:
        return {ds[i][KEY]: np.array(ds.tokens(i), dtype=np.int64) for i in range(len(ds))}


def expected_labels(row_pieces, docs, size: int, pack) -> np.ndarray:
    """A row's labels from its pieces and the documents alone."""
    labels = np.full(size, -100, dtype=np.int64)
    column = 0
    for i, (_, key, first, end) in enumerate(row_pieces):
        doc = docs[key]
        n = end - first
        labels[column : column + n - 1] = doc[first + 1 : end]
        if end < len(doc):
            labels[column + n - 1] = doc[end]
        elif pack.documents == "joined" and i + 1 < len(row_pieces):
            _, next_key, next_first, _ = row_pieces[i + 1]
            labels[column + n - 1] = docs[next_key][next_first]
        column += n
    return labels


def check_rows(batch, docs, pack, stream_next=None) -> list:
    """Every row of ``batch`` against the documents; returns its pieces."""
    size = pack.length
    assert batch["input_ids"].shape == batch["labels"].shape == batch["position_ids"].shape
    lengths = np.diff(np.asarray(batch["cu_seqlens"]))
    assert int(batch["cu_seqlens"][-1]) == len(batch["input_ids"]) * size
    assert batch["max_seqlen"] == int(lengths.max())
    pieces = []
    for r, row_pieces in enumerate(batch["__key__"]):
        ids = np.asarray(batch["input_ids"][r])
        positions = np.asarray(batch["position_ids"][r])
        column = 0
        for _, key, first, end in row_pieces:
            np.testing.assert_array_equal(ids[column : column + end - first], docs[key][first:end])
            if pack.documents == "separate":
                assert positions[column : column + end - first].tolist() == list(range(end - first))
            column += end - first
        if pack.mode == "concat":
            assert column == size
        if pack.documents == "joined":
            assert positions.tolist() == list(range(size))
        labels = np.asarray(batch["labels"][r])
        want = expected_labels(row_pieces, docs, size, pack)
        if pack.mode == "concat" and pack.documents == "joined" and want[-1] == -100:
            assert labels[-1] != -100  # the next document of the stream's first token
            want[-1] = labels[-1]
        np.testing.assert_array_equal(labels, want)
        pieces.extend(row_pieces)
    return pieces


@pytest.mark.parametrize(("mode", "documents", "long"), MODES)
def test_an_epoch_of_rows_holds_every_token_once(toks, mode, documents, long):
    pack = datapipe.pack(16, mode, documents, long)
    docs = read_documents(toks)
    loader = datapipe.Loader(toks, batch_size=1, pack=pack, num_workers=0, seed=3)
    seen = Counter()
    for batch in loader:
        for _, key, first, end in check_rows(batch, docs, pack):
            seen.update((key, t) for t in range(first, end))
    assert max(seen.values()) == 1
    if mode == "concat":  # each window's tail that does not fill a row is left out
        with open_dataset(toks) as ds:
            windows = [ds.shards[i : i + 4] for i in range(0, len(ds.shards), 4)]
        rows = [concat_rows(sum(s.tokens for s in w), 16) for w in windows]
        assert sum(seen.values()) == 16 * sum(rows) == 16 * len(loader.dataset)
    else:
        cut = (lambda d: len(d)) if long == "split" else (lambda d: min(len(d), 16))
        assert set(seen) == {(k, t) for k, d in docs.items() for t in range(cut(d))}


def epoch(url, seed=5, **options):
    loader = datapipe.Loader(url, num_workers=0, seed=seed, **options)
    return [(np.asarray(b["input_ids"]).copy(), b["__key__"]) for b in loader]


def rows_of(batches):
    return [
        (ids.tolist(), keys)
        for b_ids, b_keys in batches
        for ids, keys in zip(b_ids, b_keys, strict=True)
    ]


@pytest.mark.parametrize("mode", ["concat", "best-fit", "pad"])
def test_rows_and_their_order_do_not_depend_on_the_world(toks, mode):
    pack = datapipe.pack(16, mode)
    one = rows_of(epoch(toks, batch_size=4, pack=pack))
    ranks = [epoch(toks, batch_size=2, pack=pack, rank=r, world_size=2) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1])
    dealt = []
    for step in range(len(ranks[0])):
        for r in range(2):
            dealt.extend(rows_of([ranks[r][step]]))
    assert dealt == one


def test_another_seed_packs_and_orders_other_rows(toks):
    pack = datapipe.pack(16, "best-fit")
    assert rows_of(epoch(toks, batch_size=2, pack=pack)) != rows_of(
        epoch(toks, batch_size=2, pack=pack, seed=6)
    )


@pytest.mark.parametrize("mode", ["concat", "best-fit"])
def test_a_resume_mid_epoch_onto_another_world_finishes_the_epoch(toks, mode):
    pack = datapipe.pack(16, mode)
    whole = rows_of(epoch(toks, batch_size=4, pack=pack))
    first = datapipe.Loader(toks, batch_size=4, pack=pack, num_workers=0, seed=5)
    it = iter(first)
    head = [next(it) for _ in range(2)]
    state = first.state_dict()
    assert state["pack"] == pack.to_dict()
    rest = []
    for rank in range(2):
        again = datapipe.Loader(
            toks, batch_size=2, pack=pack, num_workers=0, seed=5, rank=rank, world_size=2
        )
        again.load_state_dict(state)
        rest.append([(np.asarray(b["input_ids"]), b["__key__"]) for b in again])
    dealt = rows_of([(np.asarray(b["input_ids"]), b["__key__"]) for b in head])
    for step in range(len(rest[0])):
        for r in range(2):
            dealt.extend(rows_of([rest[r][step]]))
    assert dealt == whole[: len(dealt)] and len(whole) - len(dealt) < 4


def test_a_state_from_other_pack_settings_is_refused_naming_them(toks, tmp_path):
    from sample_data import make_dataset

    loader = datapipe.Loader(toks, batch_size=2, pack=datapipe.pack(16), num_workers=0)
    state = loader.state_dict()
    other = datapipe.Loader(toks, batch_size=2, pack=datapipe.pack(32, "best-fit"), num_workers=0)
    with pytest.raises(ConfigError, match=r"length: 16 -> 32; mode: 'concat' -> 'best-fit'"):
        other.load_state_dict(state)
    samples = datapipe.Loader(make_dataset(tmp_path / "s"), batch_size=2, num_workers=0)
    with pytest.raises(ConfigError, match="without pack=, this one reads packed rows"):
        other.load_state_dict(samples.state_dict())
    with pytest.raises(ConfigError, match="with pack=, this one reads samples"):
        samples.load_state_dict(state)


def test_dataloader_workers_deliver_the_same_rows(toks):
    pytest.importorskip("torch")
    pack = datapipe.pack(16, "best-fit")
    alone = epoch(toks, batch_size=2, pack=pack)
    loader = datapipe.Loader(toks, batch_size=2, pack=pack, num_workers=2, seed=5)
    batches = list(loader)
    assert str(batches[0]["input_ids"].dtype) == "torch.int64"
    assert rows_of([(b["input_ids"].numpy(), b["__key__"]) for b in batches]) == rows_of(alone)
    assert str(batches[0]["cu_seqlens"].dtype) == "torch.int32"


def test_pack_errors_name_what_to_do(toks, tmp_path):
    from sample_data import make_dataset

    samples = make_dataset(tmp_path / "samples")
    with pytest.raises(ConfigError, match=r"pack= reads token versions .* has the fields"):
        datapipe.Loader(samples, pack=datapipe.pack(16), num_workers=0)
    for length in (1, 2**20 + 1):
        with pytest.raises(ConfigError, match=r"outside 2\.\.1048576"):
            datapipe.pack(length)
    with pytest.raises(ConfigError, match="did you mean 'best-fit'"):
        datapipe.pack(16, mode="best_fit")
    with pytest.raises(ConfigError, match="documents='whole' is not one of separate, joined"):
        datapipe.pack(16, documents="whole")
    with pytest.raises(ConfigError, match=r"is a token version: .* pack=datapipe.pack"):
        datapipe.Loader(toks, num_workers=0)
    with pytest.raises(ConfigError, match=r"packs into no row of 1048576 tokens .* smaller length"):
        datapipe.Loader(toks, pack=datapipe.pack(2**20), num_workers=0)
    with pytest.raises(ConfigError, match=r"2147483648 tokens a batch, past the int32 offsets"):
        datapipe.Loader(toks, batch_size=2**27, pack=datapipe.pack(16), num_workers=0)
    with pytest.raises(ConfigError, match="fields= and decode= do not apply"):
        datapipe.Loader(toks, pack=datapipe.pack(16), fields=["tokens"], num_workers=0)


def test_a_shard_dataset_of_ones_own_dataloader_takes_pack_too(toks):
    torch = pytest.importorskip("torch")
    from datapipe.loader.torch import ShardDataset

    pack = datapipe.pack(16, "best-fit")
    ds = ShardDataset(toks, batch_size=2, pack=pack, seed=5)
    batches = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
    assert len(batches) == len(ds)
    as_tuples = [[[tuple(p) for p in row] for row in b["__key__"]] for b in batches]  # the
    # DataLoader's default_convert gives lists for tuples
    assert rows_of(
        [(b["input_ids"].numpy(), k) for b, k in zip(batches, as_tuples, strict=True)]
    ) == rows_of(epoch(toks, batch_size=2, pack=pack))


def test_drop_last_pad_fills_the_last_batch_of_rows_from_the_epochs_start(toks):
    pack = datapipe.pack(16, "best-fit")
    dropped = epoch(toks, batch_size=4, pack=pack)
    padded = epoch(toks, batch_size=4, pack=pack, drop_last="pad")
    rows = len(datapipe.Loader(toks, batch_size=4, pack=pack, num_workers=0).dataset)
    assert rows % 4  # the fixture's rows do not fill whole batches
    assert len(padded) == len(dropped) + 1 and rows_of(padded)[: 4 * len(dropped)] == rows_of(
        dropped
    )
    assert rows_of(padded)[rows:] == rows_of(padded)[: 4 * len(padded) - rows]  # wrapped around


def test_a_second_resume_continues_where_the_first_left_off(toks):
    pack = datapipe.pack(16, "best-fit")
    whole = rows_of(epoch(toks, batch_size=2, pack=pack))
    got, state = [], None
    for stop in (3, 4):  # two jobs cut short, then one that runs to the end of the epoch
        loader = datapipe.Loader(toks, batch_size=2, pack=pack, num_workers=0, seed=5)
        if state is not None:
            loader.load_state_dict(state)
        it = iter(loader)
        got += rows_of(
            [(np.asarray(b["input_ids"]), b["__key__"]) for b in itertools.islice(it, stop)]
        )
        state = loader.state_dict()
    last = datapipe.Loader(toks, batch_size=2, pack=pack, num_workers=0, seed=5)
    last.load_state_dict(state)
    got += rows_of([(np.asarray(b["input_ids"]), b["__key__"]) for b in last])
    assert got == whole and last.state_dict()["epoch"] == 1


def test_a_windows_pages_stay_mapped_until_a_windows_worth_of_rows_is_read(toks, monkeypatch):
    # rows are read all over a window: unmapping its pages every few rows (as a samples reader
    # unmaps every DROP_BYTES) would fault them in again and again
    from datapipe.loader import batches as batches_module
    from datapipe.loader.tokens.packed_files import PackedFiles

    drops = []
    unmap = PackedFiles.drop_pages
    monkeypatch.setattr(PackedFiles, "drop_pages", lambda s, w: drops.append(w) or unmap(s, w))
    monkeypatch.setattr(batches_module, "DROP_BYTES", 1)  # a samples reader would unmap each batch
    monkeypatch.setattr(batches_module, "PACKED_CHUNK_BATCHES", 1)
    loader = datapipe.Loader(
        toks, batch_size=2, pack=datapipe.pack(16), block_shards=2, shuffle=True, num_workers=0
    )
    batches = sum(1 for _ in loader)
    windows = len(loader.batch_source().dataset.shard_sizes)
    assert batches > 2 * windows and 0 < len(drops) <= 2 * windows
