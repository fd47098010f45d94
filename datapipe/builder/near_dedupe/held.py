"""A near_dedupe stage's signed documents as its workers hold them, a block each (the versions
checked against first, then the partitions in source order; documents numbered by block and row:
``resolve.numbers``), and what the client asks of them without fetching them: each block's size
and documents without a word, the labels of a few documents, and the similarity estimates of
pairs. For those, the pairs sorted by their second document are cut into comparisons of about
COMPARED_BYTES of signatures, and each pair's first signature is sent to its comparison, a piece
per block of first documents: the client holds pairs and estimates, never signatures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from datapipe.builder.near_dedupe.minhash import is_empty, similarity
from datapipe.builder.near_dedupe.resolve import ROW_BITS, ROWS, by_block
from datapipe.builder.pass_runner import PassRunner
from datapipe.builder.removals import Signed

# the signatures of both sides of the pairs one task compares: few tasks (each block of first
# documents sends a piece to each comparison it has pairs in), each well inside a worker
COMPARED_BYTES = 32 << 20


class HeldDocuments:
    """Blocks of signed documents held on the workers (kept tasks of ``Signed``), asked through
    ``run`` in passes named after the stage's ``label``."""

    def __init__(self, run: PassRunner, label: str, blocks: Sequence[Any]) -> None:
        from dask import delayed

        self.run, self.label, self.blocks = run, label, list(blocks)
        shapes = run(f"{label} collect", [delayed(shape)(b) for b in self.blocks])
        self.sizes = [size for size, _, _ in shapes]
        self._empty = [empty for _, empty, _ in shapes]
        self.width = max((width for _, _, width in shapes), default=1)  # hashes a signature

    def empty(self) -> np.ndarray:
        """The documents without a shingle, ascending."""
        found = [(np.int64(b) << ROW_BITS) | rows for b, rows in enumerate(self._empty)]
        return np.concatenate(found) if found else np.zeros(0, np.int64)

    def labels(self, docs: np.ndarray) -> list[str]:
        """The labels of documents ``docs``, in that order."""
        from dask import delayed

        docs = np.asarray(docs, dtype=np.int64)
        grouped = list(by_block(docs >> ROW_BITS))
        tasks = [delayed(labels_at)(self.blocks[b], docs[at] & ROWS) for b, at in grouped]
        out = np.empty(len(docs), dtype=object)
        for (_, at), labels in zip(grouped, self.run(f"{self.label} labels", tasks), strict=True):
            out[at] = labels
        return [str(label) for label in out]

    def similarity(self, first: np.ndarray, second: np.ndarray, why: str) -> np.ndarray:
        """The estimated similarity of each pair (``first[i]``, ``second[i]``), in the pass
        "LABEL ``why``": per block of first documents, a task that cuts their signatures into a
        piece per comparison; per comparison, a task with its blocks of second documents."""
        from dask import delayed

        first, second = np.asarray(first, np.int64), np.asarray(second, np.int64)
        if not len(first):
            return np.zeros(0)
        order = np.lexsort((first >> ROW_BITS, second >> ROW_BITS))  # by second's block, first's
        first, second = first[order], second[order]
        at_once = max(1, COMPARED_BYTES // (2 * 4 * self.width))
        part = np.arange(len(first)) // at_once
        pieces: dict[int, list[Any]] = {}
        for block, at in by_block(first >> ROW_BITS):  # blocks ascending, their pairs in order
            cuts = np.flatnonzero(np.diff(part[at])) + 1
            cut = delayed(signature_pieces, nout=len(cuts) + 1)(
                self.blocks[block], first[at] & ROWS, cuts
            )
            for c, piece in zip(part[at][np.r_[0, cuts]].tolist(), cut, strict=True):
                pieces.setdefault(c, []).append(piece)
        tasks = []
        for c, lo in enumerate(range(0, len(first), at_once)):
            hi = lo + at_once
            targets, which = np.unique(second[lo:hi] >> ROW_BITS, return_inverse=True)
            # the pieces come block by block of first documents: the pairs in that order
            given = np.argsort(first[lo:hi] >> ROW_BITS, kind="stable")
            blocks = [self.blocks[t] for t in targets.tolist()]
            rows = second[lo:hi] & ROWS
            tasks.append(delayed(compared)(which, rows, given, len(blocks), *blocks, *pieces[c]))
        out = np.empty(len(first))
        estimates = self.run(f"{self.label} {why}", tasks)
        out[order] = np.concatenate([np.zeros(0), *estimates])
        return out


def shape(signed: Signed) -> tuple[int, np.ndarray, int]:
    """A block's size, its documents without a shingle, and its signatures' width."""
    empty = np.flatnonzero(is_empty(signed.signatures)).astype(np.int64)
    return len(signed), empty, signed.signatures.shape[1]


def labels_at(signed: Signed, rows: np.ndarray) -> np.ndarray:
    """The labels of a block's rows ``rows``."""
    return signed.labels[rows]


def signature_pieces(signed: Signed, rows: np.ndarray, cuts: np.ndarray) -> list[np.ndarray]:
    """The signatures of a block's rows ``rows``, cut at ``cuts``: a piece per comparison."""
    return np.split(signed.signatures[rows], cuts)


def compared(
    which: np.ndarray, rows: np.ndarray, given: np.ndarray, count: int, *given_blocks: Any
) -> np.ndarray:
    """The similarity estimates of a comparison's pairs: the signatures of their first documents
    (the pieces after its ``count`` blocks, which hold the pairs in the order ``given``) against
    those of their second documents (row ``rows[i]`` of block ``which[i]`` of the blocks)."""
    blocks, pieces = given_blocks[:count], given_blocks[count:]
    firsts = np.empty((len(rows), blocks[0].signatures.shape[1]), dtype=np.uint32)
    firsts[given] = np.concatenate(pieces)
    seconds = np.empty_like(firsts)
    for b, signed in enumerate(blocks):
        at = np.flatnonzero(which == b)
        seconds[at] = signed.signatures[rows[at]]
    return similarity(firsts, seconds)
