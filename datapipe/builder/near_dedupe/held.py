"""A near_dedupe stage's signed documents as its workers hold them, a block each (the versions
checked against first, then the partitions in source order; documents numbered by block and row:
``resolve.numbers``), and what the client asks of them without fetching them: each block's size
and documents without a word, the labels of a few documents, and the similarity estimates of
pairs. For those, each pair's first signature is sent to the block of its second, in pieces of at
most PAIRS_AT_ONCE pairs: the client holds pairs and estimates, never signatures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from datapipe.builder.near_dedupe.minhash import is_empty, similarity
from datapipe.builder.near_dedupe.resolve import ROW_BITS, ROWS
from datapipe.builder.pass_runner import PassRunner
from datapipe.builder.removals import Signed

PAIRS_AT_ONCE = 1 << 14  # pairs one task compares: two signatures of 4 KB a pair at 1,024 hashes


class HeldDocuments:
    """Blocks of signed documents held on the workers (kept tasks of ``Signed``), asked through
    ``run`` in passes named after the stage's ``label``."""

    def __init__(self, run: PassRunner, label: str, blocks: Sequence[Any]) -> None:
        from dask import delayed

        self.run, self.label, self.blocks = run, label, list(blocks)
        shapes = run(f"{label} collect", [delayed(shape)(b) for b in self.blocks])
        self.sizes = [size for size, _ in shapes]
        self._empty = [empty for _, empty in shapes]

    def empty(self) -> np.ndarray:
        """The documents without a shingle, ascending."""
        found = [(np.int64(b) << ROW_BITS) | rows for b, rows in enumerate(self._empty)]
        return np.concatenate(found) if found else np.zeros(0, np.int64)

    def labels(self, docs: np.ndarray) -> list[str]:
        """The labels of documents ``docs``, in that order."""
        from dask import delayed

        docs = np.asarray(docs, dtype=np.int64)
        block = docs >> ROW_BITS
        wanted = np.unique(block).tolist()
        tasks = [delayed(labels_at)(self.blocks[b], docs[block == b] & ROWS) for b in wanted]
        out = np.empty(len(docs), dtype=object)
        for b, labels in zip(wanted, self.run(f"{self.label} labels", tasks), strict=True):
            out[block == b] = labels
        return [str(label) for label in out]

    def similarity(self, first: np.ndarray, second: np.ndarray, why: str) -> np.ndarray:
        """The estimated similarity of each pair (``first[i]``, ``second[i]``), in the pass
        "LABEL ``why``": per block of first documents, a task that cuts their signatures into a
        piece per comparison; per comparison (pairs of one block of second documents), a task."""
        from dask import delayed

        first, second = np.asarray(first, np.int64), np.asarray(second, np.int64)
        if not len(first):
            return np.zeros(0)
        source, target = first >> ROW_BITS, second >> ROW_BITS
        order = np.lexsort((source, target))  # by second's block, then first's
        part = comparisons(target[order])
        pieces: dict[int, list[Any]] = {}
        for block in np.unique(source).tolist():
            at = np.flatnonzero(source[order] == block)
            cuts = np.flatnonzero(np.diff(part[at])) + 1
            rows = first[order][at] & ROWS
            cut = delayed(signature_pieces, nout=len(cuts) + 1)(self.blocks[block], rows, cuts)
            for c, piece in zip(part[at][np.r_[0, cuts]].tolist(), cut, strict=True):
                pieces.setdefault(c, []).append(piece)
        starts = np.flatnonzero(np.r_[True, np.diff(part) != 0])
        tasks = [
            delayed(compared)(
                self.blocks[int(target[order][a])], second[order][a:b] & ROWS, *pieces[int(c)]
            )
            for c, a, b in zip(part[starts], starts, np.r_[starts[1:], len(part)], strict=True)
        ]
        out = np.empty(len(first))
        estimates = self.run(f"{self.label} {why}", tasks)
        out[order] = np.concatenate([np.zeros(0), *estimates])
        return out


def comparisons(blocks: np.ndarray) -> np.ndarray:
    """For pairs sorted by their second document's block (``blocks``), the comparison each is in:
    runs of one block, at most PAIRS_AT_ONCE pairs each."""
    new_block = np.r_[True, blocks[1:] != blocks[:-1]] if len(blocks) else np.zeros(0, bool)
    run_start = np.maximum.accumulate(np.where(new_block, np.arange(len(blocks)), 0))
    new = new_block | ((np.arange(len(blocks)) - run_start) % PAIRS_AT_ONCE == 0)
    return np.cumsum(new) - 1


def shape(signed: Signed) -> tuple[int, np.ndarray]:
    """A block's size and its documents without a shingle."""
    return len(signed), np.flatnonzero(is_empty(signed.signatures)).astype(np.int64)


def labels_at(signed: Signed, rows: np.ndarray) -> np.ndarray:
    """The labels of a block's rows ``rows``."""
    return signed.labels[rows]


def signature_pieces(signed: Signed, rows: np.ndarray, cuts: np.ndarray) -> list[np.ndarray]:
    """The signatures of a block's rows ``rows``, cut at ``cuts``: a piece per comparison."""
    return np.split(signed.signatures[rows], cuts)


def compared(signed: Signed, rows: np.ndarray, *pieces: np.ndarray) -> np.ndarray:
    """The similarity estimates of a comparison's pairs: the signatures of their first documents
    (``pieces``, in order) against those of rows ``rows`` of this block."""
    return similarity(np.concatenate(pieces), signed.signatures[rows])
