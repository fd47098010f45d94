"""Packed concat rows against Megatron-Core's GPTDataset over the same token shard.

``pack(L, "concat", "joined")`` cuts the stream of a window's documents, taken in its packing
order, into rows: row r reads stream tokens [r L, (r + 1) L + 1), input_ids the first L, labels
the last L, positions 0..L-1. GPTDataset (megatron/core/datasets/gpt_dataset.py, and
build_sample_idx in helpers.cpp) does the same with its ``document_index`` as the order: sample i
reads tokens [i L, (i + 1) L + 1) of that stream (``add_extra_token_to_sequence``), tokens the
first L, labels the last L. Megatron draws its order itself (numpy RandomState(random_seed)
shuffling the split's documents) and has no setting for another, so the tests give datapipe
megatron's order instead: a second version whose one shard stores the documents in megatron's
epoch-0 order, read by a Loader with shuffle=False. Every row is then compared with megatron's
sample of the same number in ``sample_index`` order (its ``shuffle_index`` undone).

What these tests show is the same: the number of rows, (T - 1) // L for T tokens (both leave
out the tail too short for a row and its extra label token), where each row starts
(``sample_index`` against the row's first piece), input_ids, labels and positions. And
``documents="separate"`` gives what GPTDataset gives with reset_position_ids,
reset_attention_mask and eod_mask_loss (labels -100 exactly where its loss_mask is 0, a
cu_seqlens segment wherever its attention mask restarts), as long as every document ends with
the end-of-text id and holds no other (the tokenize stage appends it with ``eos: true``).

What differs, outside these tests (docs/guide/loading.md#packed-sequences says it too):
- the order of documents. Megatron shuffles a whole split of a prefix with
  numpy.random.RandomState(random_seed); datapipe permutes each window (block_shards shards) with
  its own generator drawn from the seed, or keeps storage order with shuffle=False. The same
  seed gives different orders, so the rows are the same only when the order is.
- more than one epoch. Megatron's ``num_samples`` past one epoch repeats the documents in one
  document_index shuffled across all its epochs (the last one apart when it is short), so its
  samples cross epoch boundaries and differ from epoch to epoch; datapipe packs a window once and
  each epoch delivers those same rows in a new order.
- the order of rows. Megatron's shuffle_index permutes all samples of the dataset; datapipe
  permutes windows, shuffles rows within each, and deals them to ranks by the Loader's plan.
- a last partial row. Megatron's valid split with drop_last_partial_validation_sequence=False
  keeps it, padded with the pad id; datapipe always leaves it out.
- add_extra_token_to_sequence=False (rows of L tokens, the last label a pad) has no datapipe form.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers.versions import commit_tokens

import datapipe
from datapipe.formats.base import KEY
from datapipe.loader.dataset import open_dataset
from datapipe.versioning.store import Store

with warnings.catch_warnings():  # it warns that Transformer Engine and Apex are not installed
    warnings.simplefilter("ignore")
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

EOD = 0
DOCUMENTS = 40


class Tokenizer:
    """What GPTDataset reads of a tokenizer: the vocabulary size, the end-of-document id (which
    its reset_* and eod_mask_loss options look for), the pad id and what names it in the cache's
    key. The documents here are made of ids, so nothing else is needed."""

    vocab_size = 65_536
    eod = EOD
    pad = -1  # an id no document holds (megatron masks the loss where a label is the pad id)
    unique_identifiers = {"class": "tests.loader.tokens.test_megatron_rows.Tokenizer"}


def documents(seed: int) -> list[dict]:
    """Documents of 1 to 150 ids ending with EOD, no other EOD in them; a document's ids are its
    own range, so a misplaced token shows."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(DOCUMENTS):
        n = int(rng.integers(1, 151))
        ids = np.append(1 + (np.arange(n - 1) + 211 * k) % 65_000, EOD).astype(np.uint16)
        out.append({KEY: f"d{k:05d}", "tokens": ids, "url": b"u"})
    return out


def helpers_built() -> None:
    """GPTDataset builds its sample index in C++ (megatron/core/datasets/helpers_cpp*.so). The
    Linux wheels on PyPI (x86_64 and aarch64, CPython 3.10 to 3.13) hold it built; from the sdist
    pip builds it as an optional extension, left out without a C++ compiler, and megatron-core
    does not build it at first use: fail saying so rather than with an import error inside
    megatron."""
    try:
        from megatron.core.datasets import helpers  # noqa: F401
    except ImportError as error:
        pytest.fail(
            f"megatron-core's compiled dataset helpers are missing ({error}): install one of its "
            "Linux wheels, or reinstall it from source with a C++ compiler and pybind11"
        )


def megatron(url: str, length: int, seed: int, cache, separate: bool = False) -> GPTDataset:
    """GPTDataset over the one shard of ``url`` as Megatron-LM's pretraining builds it: the shard's
    prefix as the blend, all of it the train split, one epoch (sizes None)."""
    helpers_built()
    with open_dataset(url) as ds:
        path = ds.shard_path(0)
    assert path.endswith(".bin")
    config = GPTDatasetConfig(
        random_seed=seed,
        sequence_length=length,
        blend=([path[: -len(".bin")]], None),
        split="1,0,0",
        path_to_cache=str(cache),  # megatron would otherwise write into the version's directory
        tokenizer=Tokenizer(),
        reset_position_ids=separate,
        reset_attention_mask=separate,
        eod_mask_loss=separate,
        create_attention_mask=separate,
    )
    train, valid, test = BlendedMegatronDatasetBuilder(
        GPTDataset, [None, None, None], lambda: True, config
    ).build()
    assert isinstance(train, GPTDataset) and valid is None and test is None
    return train


def in_megatron_order(tmp_path, length: int, seed: int, separate: bool = False):
    """(megatron's dataset, its samples in sample_index order, datapipe's rows of the same
    documents in megatron's order, one a batch, the documents, megatron's order)."""
    docs = documents(seed)
    store = Store(str(tmp_path / "store"))
    commit_tokens(store, [docs], name="web")
    gpt = megatron(str(tmp_path / "store" / "web"), length, seed, tmp_path / "cache", separate)
    order = np.asarray(gpt.document_index).tolist()
    assert sorted(order) == list(range(DOCUMENTS)) and order != sorted(order)
    commit_tokens(store, [[docs[i] for i in order]], name="megatron-order")
    pack = datapipe.pack(length, "concat", "separate" if separate else "joined")
    loader = datapipe.Loader(
        str(tmp_path / "store" / "megatron-order"),
        batch_size=1,
        pack=pack,
        shuffle=False,
        num_workers=0,
    )
    rows = list(loader)
    samples = [gpt[int(i)] for i in np.argsort(gpt.shuffle_index)]  # sample j at argsort[j]
    return gpt, samples, rows, docs, order


@pytest.mark.parametrize("seed", [1234, 7])
@pytest.mark.parametrize("length", [8, 37, 256])
def test_joined_rows_are_megatrons_samples_in_the_same_document_order(tmp_path, length, seed):
    gpt, samples, rows, docs, order = in_megatron_order(tmp_path, length, seed)
    stream = np.concatenate([docs[i]["tokens"] for i in order]).astype(np.int64)
    assert len(rows) == len(samples) == len(gpt) == (len(stream) - 1) // length
    sample_index = np.asarray(gpt.sample_index)
    for j, (row, sample) in enumerate(zip(rows, samples, strict=True)):
        ids, labels = np.asarray(row["input_ids"][0]), np.asarray(row["labels"][0])
        np.testing.assert_array_equal(ids, sample["tokens"].numpy())
        np.testing.assert_array_equal(labels, sample["labels"].numpy())
        np.testing.assert_array_equal(
            np.asarray(row["position_ids"][0]), sample["position_ids"].numpy()
        )
        assert sample["loss_mask"].min() == 1 and labels.min() >= 0  # no token left unlearned
        np.testing.assert_array_equal(ids, stream[j * length : (j + 1) * length])
        np.testing.assert_array_equal(labels, stream[j * length + 1 : (j + 1) * length + 1])
        assert np.asarray(row["cu_seqlens"]).tolist() == [0, length]
        # where the row starts: megatron's (place in document_index, offset) is its first piece
        place, offset = sample_index[j].tolist()
        _, key, first, _ = row["__key__"][0][0]
        assert (key, first) == (docs[order[place]][KEY], offset)


@pytest.mark.parametrize("length", [8, 37, 256])
def test_separate_rows_are_megatrons_samples_with_its_resets_at_end_of_document(tmp_path, length):
    """Megatron resets positions and attention after each EOD id and masks the loss where the
    input is EOD; datapipe does so at each document's end. They agree when every document ends
    with EOD and holds no other."""
    _, samples, rows, _, _ = in_megatron_order(tmp_path, length, 1234, separate=True)
    assert len(rows) == len(samples)
    causal = np.tril(np.ones((length, length), dtype=bool))
    for row, sample in zip(rows, samples, strict=True):
        ids, labels = np.asarray(row["input_ids"][0]), np.asarray(row["labels"][0])
        np.testing.assert_array_equal(ids, sample["tokens"].numpy())
        np.testing.assert_array_equal(
            np.asarray(row["position_ids"][0]), sample["position_ids"].numpy()
        )
        learned = sample["loss_mask"].numpy() == 1
        np.testing.assert_array_equal(labels != -100, learned)
        np.testing.assert_array_equal(labels[learned], sample["labels"].numpy()[learned])
        segment = np.repeat(np.arange(len(row["cu_seqlens"]) - 1), np.diff(row["cu_seqlens"]))
        seen = causal & (segment[:, None] == segment[None, :])
        np.testing.assert_array_equal(~seen, sample["attention_mask"][0].numpy())
