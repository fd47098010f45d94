"""A long document is encoded in pieces only where that gives the ids of one call on it whole."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.text import train_tokenizer
from hypothesis import given
from hypothesis import strategies as st

from datapipe.builder import tokenize_stage
from datapipe.builder.tokenize_stage import TokenizerFile, cut_long, encode, splittable

# words, runs of spaces and newlines, contractions, digits, punctuation and non-ASCII letters
TEXT = st.lists(
    st.sampled_from(
        ["ab", "xyz", " ", "  ", "\n", "\n\n", " \n", "\t", "'s", "'ll", "é", "1", ".", ",-"]
    ),
    max_size=120,
).map("".join)


@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> TokenizerFile:
    path = train_tokenizer(tmp_path_factory.mktemp("bpe") / "bpe.json")
    data = path.read_bytes()
    return TokenizerFile(data, "0" * 64, "bpe.json", 400, 0, None)


@given(TEXT, st.integers(1, 40))
def test_pieces_put_back_together_are_the_text(text, size):
    pieces = cut_long(text, size)
    assert "".join(pieces) == text and (all(pieces) or pieces == [""])
    for before, after in zip(pieces, pieces[1:], strict=False):
        assert before[-1:].strip() and after[:1] in (" ", "\n") and after[1:2].strip()


@given(texts=st.lists(TEXT, min_size=1, max_size=4))
def test_a_document_encoded_in_pieces_has_the_ids_of_it_whole(bpe, texts):
    whole = encode(texts, bpe)
    original = tokenize_stage.LONG_CHARS
    tokenize_stage.LONG_CHARS = 7  # every text of more than 7 characters goes in pieces
    try:
        cut = encode(texts, bpe)
    finally:
        tokenize_stage.LONG_CHARS = original
    assert [a.tolist() for a in cut] == [a.tolist() for a in whole]


def test_only_a_byte_level_regex_pre_tokenizer_without_prefix_space_is_cut(bpe):
    from tokenizers import Tokenizer, normalizers, pre_tokenizers

    tokenizer = Tokenizer.from_str(bpe.data.decode())
    assert splittable(tokenizer)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    assert not splittable(tokenizer)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    assert not splittable(tokenizer)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    assert not splittable(tokenizer)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.normalizer = normalizers.NFKC()
    assert not splittable(tokenizer)
    assert np.array_equal(encode(["x"], bpe)[0][-1:], [0])  # the EOS after the pieces
