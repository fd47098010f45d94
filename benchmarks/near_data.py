"""The near-duplicate workload: W5's documents in source order, then near-copies of some of them
planted at controlled similarities (``near_corpus``), as JSONL parts of {id, text}."""

from __future__ import annotations

import json
import os
import random

from benchmarks.near_corpus import LEVELS, Planted, near_copy, shingle_set
from datapipe.builder.near_dedupe.shingles import words_of

PARTS = 8  # JSONL files: the originals in 7, the copies in the last (after them in source order)
WORDS = (40, 4000)  # originals are drawn among documents of this many words (the editing is exact)


def document_id(i: int) -> str:
    """The id of document ``i`` of the corpus."""
    return f"n{i:07d}"


def planted_corpus(originals: list[str], per_level: int, seed: int = 0) -> Planted:
    """``originals`` then ``per_level`` copies at each of LEVELS, of distinct originals of
    WORDS words."""
    rng = random.Random(seed)
    fit = [i for i, t in enumerate(originals) if WORDS[0] <= len(t.split()) <= WORDS[1]]
    # words that occur in the texts, for insertions and substitutions
    vocabulary = sorted({w for i in fit[:500] for w in words_of(originals[i])})
    chosen = rng.sample(fit, per_level * len(LEVELS))
    texts, copies = list(originals), []
    for n, i in enumerate(chosen):
        target = LEVELS[n // per_level]
        copy, exact = near_copy(originals[i], target, 5, seed * 100_003 + n, vocabulary)
        copies.append((len(texts), i, exact, target))
        texts.append(copy)
    return Planted(texts, copies)


def write_corpus(corpus: Planted, directory: str) -> None:
    """The corpus as PARTS JSONL files in ``directory``: originals, then the copies last."""
    os.makedirs(directory, exist_ok=True)
    first_copy = corpus.copies[0][0] if corpus.copies else len(corpus.texts)
    bounds = [round(first_copy * k / (PARTS - 1)) for k in range(PARTS)] + [len(corpus.texts)]
    for part in range(PARTS):
        with open(os.path.join(directory, f"part-{part:02d}.jsonl"), "w", encoding="utf-8") as f:
            for i in range(bounds[part], bounds[part + 1]):
                f.write(json.dumps({"id": document_id(i), "text": corpus.texts[i]}) + "\n")


def exact_similarity(a: str, b: str) -> float:
    """The exact Jaccard similarity of two texts' 5-word shingles (empty: 0)."""
    first, second = shingle_set(a, 5), shingle_set(b, 5)
    union = len(first | second)
    return len(first & second) / union if union else 0.0
