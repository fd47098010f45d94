"""A document's word shingles as 64-bit hashes: lower-cased, split into words at whitespace and
punctuation (``\\w+``), every run of ``size`` consecutive words one shingle (a document of fewer
words is one shingle of all of them; one of no words has none)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

WORD = re.compile(r"\w+")
HASH_KEY = "datapipe-words01"  # siphash key of a word (16 bytes)
MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: the multiplier that chains a shingle's words
CHUNK_WORDS = 1 << 17  # documents are shingled this many words at a time (one may be longer):
# each word is a Python string until hashed, and a worker keeps the heap a larger run leaves


def words_of(text: Any) -> list[str]:
    """The words of ``text`` (none for a null or a non-text value)."""
    return WORD.findall(text.lower()) if isinstance(text, str) else []


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit moves every output bit."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def shingle_chunks(
    texts: Sequence[Any], size: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(documents, shingle hashes, owner) for runs of documents of about CHUNK_WORDS words:
    ``owner[i]`` is the index in ``documents`` (numbers into ``texts``) of hash ``i``'s
    document, ascending."""
    docs: list[int] = []
    words: list[str] = []
    counts: list[int] = []
    for i, text in enumerate(texts):
        found = words_of(text)
        docs.append(i)
        words.extend(found)
        counts.append(len(found))
        if len(words) >= CHUNK_WORDS:
            yield _shingles(np.array(docs), words, np.array(counts, dtype=np.int64), size)
            docs, words, counts = [], [], []
    if docs:
        yield _shingles(np.array(docs), words, np.array(counts, dtype=np.int64), size)


def _shingles(
    docs: np.ndarray, words: list[str], counts: np.ndarray, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every shingle hash of documents whose words (``counts`` each) are ``words``, in order."""
    total = len(words)
    if not total:
        return docs, np.zeros(0, np.uint64), np.zeros(0, np.int64)
    h = pd.util.hash_array(np.array(words, dtype=object), hash_key=HASH_KEY).astype(np.uint64)
    owner = np.repeat(np.arange(len(counts)), counts)
    end = np.cumsum(counts)[owner]  # where each word's document ends
    at = np.arange(total)
    x = np.zeros(total, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(size):  # x[i]: the words i .. i + size - 1 of one document, chained
            inside = at + j < end
            x = x * MIX + np.where(inside, h[np.minimum(at + j, total - 1)], np.uint64(0))
    start = end - counts[owner]
    # a shingle starts at every word with size - 1 more after it, or at a short document's first
    first = (at + size <= end) | ((at == start) & (counts[owner] < size))
    return docs, mix64(x[first]), owner[first]
