"""Mixes of token versions read as rows: weights exact in rows, one tokenizer, tokens only."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from helpers.versions import TOKEN_FIELDS
from test_packed_rows import token_shards

import datapipe
from datapipe.errors import ConfigError
from datapipe.formats.registry import get_format
from datapipe.loader import batches as batches_module
from datapipe.loader.torch.dataloader import SENT_AS_BYTES
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.manifest_parts import Lineage, TokenizerRef
from datapipe.versioning.store import Store


def commit(root, name, seed, sha="a" * 64, eos=0) -> str:
    """A token version whose manifest names a tokenizer of hash ``sha`` and end-of-text ``eos``."""
    store = Store(str(root))
    writer = store.begin(name)
    fmt = get_format("tokens")
    shards = token_shards(seed, shards=5)
    entries = tuple(writer.write_shard(i, docs, fmt) for i, docs in enumerate(shards))
    writer.put_file("tokenizer.json", b"{}")
    tokenizer = TokenizerRef(
        file="tokenizer.json",
        bytes=2,
        sha256=sha,
        library="0.23.3",
        vocab_size=65_000,
        dtype="uint16",
        eos_id=eos,
    )
    writer.commit(
        Manifest(
            name=name,
            shard_format="tokens",
            fields=TOKEN_FIELDS,
            shards=entries,
            lineage=Lineage(tokenizer=tokenizer),
        ),
        ("latest",),
    )
    return f"{root}/{name}"


def test_a_mix_gives_each_source_its_weight_of_rows_at_every_prefix(tmp_path):
    web, code = commit(tmp_path, "web", 1), commit(tmp_path, "code", 2)
    mixed = datapipe.mix({"web": web, "code": code}, weights={"web": 0.7, "code": 0.3})
    loader = datapipe.Loader(mixed, batch_size=1, pack=datapipe.pack(16), num_workers=0)
    sources, rows = [], Counter()
    for batch in loader:
        (source,) = batch["__source__"]
        sources.append(source)
        rows[(source, str(batch["__key__"][0]))] += 1
        assert all(piece[0] == source for piece in batch["__key__"][0])
    assert len(sources) == len(loader.dataset) == loader.dataset.epoch_samples
    webs = np.cumsum([s == "web" for s in sources])
    assert np.abs(webs - 0.7 * np.arange(1, len(sources) + 1)).max() <= 1
    sizes = dict(zip(loader.dataset.names, map(len, loader.dataset.datasets), strict=True))
    for name in sizes:  # a source's rows repeat only in its next pass
        per_row = [n for (source, _), n in rows.items() if source == name]
        assert max(per_row) == -(-sources.count(name) // sizes[name])


def test_a_mix_of_two_tokenizers_or_end_ids_is_refused_naming_both(tmp_path):
    web, other = commit(tmp_path, "web", 1), commit(tmp_path, "other", 2, sha="b" * 64)
    mixed = datapipe.mix({"web": web, "other": other})
    with pytest.raises(
        ConfigError,
        match=r"'web' \(web@\w+\) and 'other' \(other@\w+\) have "
        r"different tokenizers \(sha256 aaaaaaaaaaaa and sha256 bbbbbbbbbbbb\)",
    ):
        datapipe.Loader(mixed, pack=datapipe.pack(16), num_workers=0)
    eos = commit(tmp_path, "eos", 3, eos=7)
    with pytest.raises(ConfigError, match=r"different end-of-text ids \(0 and 7\)"):
        datapipe.Loader(datapipe.mix({"web": web, "eos": eos}), pack=datapipe.pack(16))


def test_a_mix_of_token_and_sample_versions_is_refused(tmp_path):
    from sample_data import make_dataset

    web = commit(tmp_path, "web", 1)
    mixed = datapipe.mix({"web": web, "toy": make_dataset(tmp_path / "s")})
    with pytest.raises(ConfigError, match=r"toy: pack= reads token versions"):
        datapipe.Loader(mixed, pack=datapipe.pack(16), num_workers=0)


def test_a_reweighting_at_a_resume_continues_every_source_from_its_cursor(tmp_path):
    web, code = commit(tmp_path, "web", 1), commit(tmp_path, "code", 2)
    pack = datapipe.pack(16, "best-fit")

    def loader(weights):
        mixed = datapipe.mix({"web": web, "code": code}, weights=weights, epoch_samples=60)
        return datapipe.Loader(mixed, batch_size=2, pack=pack, num_workers=0)

    def rows(batches):
        return [
            (s, str(k)) for b in batches for s, k in zip(b["__source__"], b["__key__"], strict=True)
        ]

    before = loader({"web": 0.7, "code": 0.3})
    it = iter(before)
    head = rows([next(it) for _ in range(10)])
    after = loader({"web": 0.5, "code": 0.5})
    after.load_state_dict(before.state_dict())
    tail = rows(after)
    assert not set(head) & set(tail)  # no source rereads a row within its pass
    assert [s for s, _ in tail].count("web") == [s for s, _ in tail].count("code")


def test_a_mix_without_weights_reads_each_token_source_once_an_epoch(tmp_path):
    web, code = commit(tmp_path, "web", 1), commit(tmp_path, "code", 2)
    loader = datapipe.Loader(
        datapipe.mix({"web": web, "code": code}),
        batch_size=1,
        pack=datapipe.pack(16),
        num_workers=0,
    )
    rows = dict(zip(loader.dataset.names, map(len, loader.dataset.datasets), strict=True))
    delivered = [b["__source__"][0] for b in loader]
    assert {n: delivered.count(n) for n in rows} == rows  # weights by rows, not by documents


def batch_values(batch: dict) -> list:
    return [
        np.asarray(v).tolist() if not isinstance(v, int | list) else v for v in batch.values()
    ] + [list(batch)]


@pytest.mark.parametrize("mode", ["concat", "best-fit", "pad"])
def test_rows_found_a_few_batches_at_a_time_equal_rows_read_one_batch_by_one(
    tmp_path, monkeypatch, mode
):
    web, code = commit(tmp_path, "web", 1), commit(tmp_path, "code", 2)
    mixed = datapipe.mix({"web": web, "code": code}, weights={"web": 0.6, "code": 0.4})

    def epoch(data) -> tuple[int, list]:
        loader = datapipe.Loader(
            data, batch_size=3, pack=datapipe.pack(16, mode), shuffle=True, seed=4, num_workers=0
        )
        assert len(loader) > 2 * batches_module.PACKED_CHUNK_BATCHES
        source = loader.batch_source()
        # a DataLoader worker defers ragged and bytes fields, which packed rows have none of
        assert source.chunk_batches(SENT_AS_BYTES) == source.chunk_batches(())
        return source.chunk_batches(()), [batch_values(b) for b in loader]

    for data in (web, mixed):
        monkeypatch.setattr(batches_module, "PACKED_CHUNK_BATCHES", 8)
        chunk, chunked = epoch(data)
        monkeypatch.setattr(batches_module, "PACKED_CHUNK_BATCHES", 1)
        one, one_by_one = epoch(data)
        assert (chunk, one) == (8, 1)
        assert chunked == one_by_one
