"""One window of a token version packed into rows: which document pieces each row holds.

A window is a run of consecutive shards; its documents are taken in one order (a permutation by
the seed and the window, or storage order unshuffled), and the rows are a pure function of that
order, the lengths and the pack settings. Everything here is per window and vectorised: the plan
holds O(documents in the window), and no loop runs per document.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from datapipe.loader.tokens.best_fit import best_fit, bins_for, placement
from datapipe.loader.tokens.pack import Pack


@dataclass(frozen=True)
class WindowDocs:
    """A window's documents in packing order: the shard (number in the dataset) and document
    number of each, where its ids start in that shard's ids, and its length in tokens."""

    shard: np.ndarray
    number: np.ndarray
    offset: np.ndarray
    length: np.ndarray


@dataclass(frozen=True)
class Pieces:
    """Pieces of rows: for each, its row (in the caller's numbering), the column it starts at,
    the document (an index into the window's docs) and the token range [first, end) of it."""

    row: np.ndarray
    column: np.ndarray
    doc: np.ndarray
    first: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.row)


def _ranges(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, value): for each i, ``counts[i]`` entries starts[i], starts[i] + 1, ... owned by
    i."""
    owner = np.repeat(np.arange(len(counts)), counts)
    before = np.cumsum(counts) - counts
    return owner, np.repeat(starts - before, counts) + np.arange(int(counts.sum()))


def split_pieces(length: np.ndarray, size: int, truncate: bool) -> tuple[np.ndarray, np.ndarray]:
    """(document, first token) of each piece of at most ``size`` tokens, documents in order; with
    ``truncate``, only each document's first piece (a document of no tokens has none)."""
    counts = np.minimum(length, 1) if truncate else -(-length // size)
    doc, index = _ranges(np.zeros(len(length), dtype=np.int64), counts)
    return doc, index * size


class WindowPlan:
    """The rows of one window: ``rows`` of them, ``pieces(rows)`` for any of them."""

    def __init__(self, docs: WindowDocs, pack: Pack) -> None:
        self.docs, self.pack = docs, pack
        length = docs.length
        size = pack.length
        if pack.mode == "concat":
            self.stream = np.concatenate([[0], np.cumsum(length)]).astype(np.int64)
            self.rows = concat_rows(int(self.stream[-1]), size)
            return
        doc, first = split_pieces(length, size, pack.long == "truncate")
        end = np.minimum(first + size, length[doc])
        if pack.mode == "pad":
            row, column = np.arange(len(doc)), np.zeros(len(doc), dtype=np.int64)
            self.rows = len(doc)
        else:
            bins, self.rows = best_fit(end - first, size)
            order = placement(bins, end - first)
            doc, first, end, row = doc[order], first[order], end[order], bins[order]
            column = _columns(row, end - first)
        self.table = Pieces(row, column, doc, first, end)
        self.row_start = np.searchsorted(row, np.arange(self.rows + 1))

    def pieces(self, rows: np.ndarray) -> Pieces:
        """The pieces of ``rows`` (numbers in this window), each piece's ``row`` its place in
        ``rows``; concat rows hold length + 1 tokens (the last one only a label)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.pack.mode == "concat":
            return self._cut(rows)
        lo, hi = self.row_start[rows], self.row_start[rows + 1]
        owner, index = _ranges(lo, hi - lo)
        t = self.table
        return Pieces(owner, t.column[index], t.doc[index], t.first[index], t.end[index])

    def _cut(self, rows: np.ndarray) -> Pieces:
        """Rows of the document stream: row r holds stream tokens [r L, (r + 1) L + 1)."""
        size, stream = self.pack.length, self.stream
        lo = rows * size
        hi = lo + size + 1
        first_doc = np.searchsorted(stream, lo, side="right") - 1
        last_doc = np.searchsorted(stream, hi - 1, side="right") - 1
        owner, doc = _ranges(first_doc, last_doc - first_doc + 1)
        start = np.maximum(stream[doc], lo[owner])
        end = np.minimum(stream[doc + 1], hi[owner])
        kept = end > start  # a document of no tokens inside the range is no piece of the row
        owner, doc, start, end = owner[kept], doc[kept], start[kept], end[kept]
        return Pieces(owner, start - lo[owner], doc, start - stream[doc], end - stream[doc])


def _columns(row: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Where each piece starts in its row, pieces sorted by row."""
    ends = np.cumsum(size)
    starts = ends - size
    first_of_row = np.searchsorted(row, row)  # index of the row's first piece
    return starts - starts[first_of_row]


def concat_rows(tokens: int, length: int) -> int:
    """Rows of ``length`` tokens (plus one for the last label) a stream of ``tokens`` gives."""
    return max(0, (tokens - 1) // length)


def row_count(length: np.ndarray, pack: Pack) -> int:
    """Rows a window of documents of ``length`` tokens packs into (concat: from the total alone;
    best-fit: from how many pieces there are of each size, never the pieces themselves)."""
    length = np.asarray(length, dtype=np.int64)
    length = length[length > 0]  # a document of no tokens makes no piece
    size = pack.length
    if pack.mode == "concat":
        return concat_rows(int(length.sum()), size)
    if pack.long == "truncate":
        if pack.mode == "pad":
            return len(length)
        by_size = np.bincount(np.minimum(length, size), minlength=size + 1)
    else:
        if pack.mode == "pad":
            return int((-(-length // size)).sum())
        by_size = np.bincount(length % size, minlength=size + 1)  # each one's last piece
        by_size[0] = 0
        by_size[size] += int((length // size).sum())  # and its whole ones
    return bins_for(by_size, size)
