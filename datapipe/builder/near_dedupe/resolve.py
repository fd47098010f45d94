"""From candidate pairs to removals, on the client: the pairs whose similarity estimate (made
where the signatures are: ``held``) reaches the threshold, their clusters, and per partition the
rows a cluster's first document makes duplicates, each with its reason."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

from datapipe.builder.config_parts import NearDedupeArgs
from datapipe.builder.near_dedupe.clusters import first_of_cluster
from datapipe.builder.removals import Removal

ROW_BITS = 32  # a document's number: its block << ROW_BITS | its row there
ROWS = (1 << ROW_BITS) - 1


class Documents(Protocol):
    """Blocks of signed documents, as the client asks about them (``held.HeldDocuments``)."""

    sizes: Sequence[int]  # documents per block

    def empty(self) -> np.ndarray:
        """The documents without a shingle, ascending."""
        ...

    def labels(self, docs: np.ndarray) -> list[str]:
        """The labels of documents ``docs``, in that order."""
        ...

    def similarity(self, first: np.ndarray, second: np.ndarray, why: str) -> np.ndarray:
        """The estimated similarity of each pair (``first[i]``, ``second[i]``)."""
        ...


def numbers(block: int, rows: np.ndarray) -> np.ndarray:
    """The numbers of rows ``rows`` of block ``block``: ascending in source order."""
    return (np.int64(block) << ROW_BITS) | np.asarray(rows, dtype=np.int64)


def by_block(blocks: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Each block of ``blocks`` (one a document) with the positions of its documents there,
    ascending: one sort, not a pass over all of them per block."""
    order = np.argsort(blocks, kind="stable")
    found, starts = np.unique(blocks[order], return_index=True)
    ends = [*starts[1:].tolist(), len(order)][: len(starts)]
    for block, lo, hi in zip(found.tolist(), starts.tolist(), ends, strict=True):
        yield block, order[lo:hi]


def edges(docs: Documents, pairs: np.ndarray, args: NearDedupeArgs) -> np.ndarray:
    """The candidate pairs whose estimated similarity reaches the threshold (all of them without
    ``verify``); with empty "first", also every document without a word paired with the first
    such one."""
    found = np.unique(np.asarray(pairs, dtype=np.int64).reshape(-1, 2), axis=0)
    if args.verify:
        estimate = docs.similarity(found[:, 0], found[:, 1], "verify")
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
    estimate = docs.similarity(removed, kept, "reasons")
    names = np.array(docs.labels(kept), dtype=object)
    of_block = dict(by_block(removed >> ROW_BITS))
    out = []
    for b in range(protected, len(docs.sizes)):
        keep = np.ones(docs.sizes[b], dtype=bool)
        where = of_block.get(b, np.zeros(0, np.int64))
        keep[removed[where] & ROWS] = False
        reasons = tuple(
            f"near-duplicate of {name} (estimated similarity {s:.2f})"
            for name, s in zip(names[where].tolist(), estimate[where].tolist(), strict=True)
        )
        out.append(Removal(keep, reasons))
    return out
