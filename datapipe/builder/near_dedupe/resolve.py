"""From candidate pairs to removals, on the client: each pair's similarity estimated from the
two signatures, the clusters of those at the threshold, and per partition the rows a cluster's
first document makes duplicates, each with its reason."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from datapipe.builder.config_parts import NearDedupeArgs
from datapipe.builder.near_dedupe.clusters import first_of_cluster
from datapipe.builder.near_dedupe.minhash import is_empty, similarity
from datapipe.builder.removals import Removal, Signed

ROW_BITS = 32  # a document's number: its block << ROW_BITS | its row there
ROWS = (1 << ROW_BITS) - 1
PAIRS_AT_ONCE = 1 << 14  # pairs whose signatures are compared in one go


def numbers(block: int, rows: np.ndarray) -> np.ndarray:
    """The numbers of rows ``rows`` of block ``block``: ascending in source order."""
    return (np.int64(block) << ROW_BITS) | np.asarray(rows, dtype=np.int64)


class Documents:
    """Blocks of signed documents (the versions checked against first, then the partitions in
    source order), each document numbered by its block and row (``numbers``)."""

    def __init__(self, blocks: Sequence[Signed]) -> None:
        self.blocks = list(blocks)

    def signatures(self, docs: np.ndarray) -> np.ndarray:
        """The signatures of documents ``docs``, in that order."""
        docs = np.asarray(docs, dtype=np.int64)
        block, row = docs >> ROW_BITS, docs & ROWS
        width = self.blocks[0].signatures.shape[1] if self.blocks else 0
        out = np.empty((len(docs), width), dtype=np.uint32)
        for b in np.unique(block).tolist():
            where = block == b
            out[where] = self.blocks[b].signatures[row[where]]
        return out

    def similarity(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """The estimated similarity of each pair (``first[i]``, ``second[i]``), PAIRS_AT_ONCE
        pairs at a time: two signatures of 4 KB a pair at 1,024 hashes."""
        out = np.empty(len(first))
        for lo in range(0, len(first), PAIRS_AT_ONCE):
            hi = lo + PAIRS_AT_ONCE
            out[lo:hi] = similarity(self.signatures(first[lo:hi]), self.signatures(second[lo:hi]))
        return out

    def label(self, doc: int) -> str:
        """Document ``doc``'s label."""
        return str(self.blocks[doc >> ROW_BITS].labels[doc & ROWS])

    def empty(self) -> np.ndarray:
        """The documents without a shingle, ascending."""
        found = [
            numbers(b, np.flatnonzero(is_empty(s.signatures))) for b, s in enumerate(self.blocks)
        ]
        return np.concatenate(found) if found else np.zeros(0, np.int64)


def edges(docs: Documents, pairs: np.ndarray, args: NearDedupeArgs) -> np.ndarray:
    """The candidate pairs whose estimated similarity reaches the threshold (all of them without
    ``verify``); with empty "first", also every document without a word paired with the first
    such one."""
    found = np.unique(np.asarray(pairs, dtype=np.int64).reshape(-1, 2), axis=0)
    if args.verify:
        estimate = docs.similarity(found[:, 0], found[:, 1])
        found = found[estimate >= args.threshold]
    if args.empty == "first":
        blank = docs.empty()
        if len(blank):
            found = np.concatenate([found, np.stack([np.full_like(blank, blank[0]), blank], 1)])
    return found


def removals(docs: Documents, found: np.ndarray, protected: int) -> list[Removal]:
    """Per block from ``protected`` on (the partitions; the blocks before are only checked
    against), its keep-mask and the reason of each row it removes."""
    members, first = first_of_cluster(found)
    gone = (first != members) & ((members >> ROW_BITS) >= protected)
    removed, kept = members[gone], first[gone]
    estimate = docs.similarity(removed, kept)
    block = removed >> ROW_BITS
    out = []
    for b in range(protected, len(docs.blocks)):
        keep = np.ones(len(docs.blocks[b]), dtype=bool)
        where = np.flatnonzero(block == b)
        keep[removed[where] & ROWS] = False
        reasons = tuple(
            f"near-duplicate of {docs.label(k)} (estimated similarity {s:.2f})"
            for k, s in zip(kept[where].tolist(), estimate[where].tolist(), strict=True)
        )
        out.append(Removal(keep, reasons))
    return out
