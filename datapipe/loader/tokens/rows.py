"""A batch of packed rows from its pieces: input_ids, labels, position_ids, cu_seqlens,
max_seqlen and the pieces each row holds (docs/guide/loading.md#packed-sequences).

A batch has tens of pieces, so they are walked once as plain values (a numpy call on a handful of
numbers costs more than the arithmetic), each copied with one slice from its shard's mapped ids into
the int64 rows; whole rows are filled by numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.loader.tokens.pack import Pack

IGNORE = -100  # the label torch's cross entropy skips
ARRAYS = ("row", "column", "shard", "start", "first", "end", "length")  # BatchPieces' arrays


@dataclass(frozen=True)
class BatchPieces:
    """The pieces of a batch's rows, sorted by (row, column): where each sits, which shard's ids
    hold it (``start``: the element offset of its first token there), the token range [first,
    end) of its document, the document's length, and its (source, key) for ``__key__``."""

    row: np.ndarray
    column: np.ndarray
    shard: np.ndarray
    start: np.ndarray
    first: np.ndarray
    end: np.ndarray
    length: np.ndarray
    names: list[tuple[str, str]]


class _Rows:
    """What the walk over a batch's pieces finds, row by row."""

    def __init__(self, rows: int) -> None:
        self.end = [0] * rows  # where each row's real tokens end
        self.last = [-1] * rows  # each row's last piece holding input tokens
        self.keys: list[list[tuple[str, str, int, int]]] = [[] for _ in range(rows)]
        self.spans: list[list[int]] = [[] for _ in range(rows)]  # each row's pieces' lengths


class ShardIds(dict[int, np.ndarray]):
    """Shards' token ids by shard code, each looked up (``lookup(code)``) the first time it is
    asked for: one cache for all the batches of a chunk."""

    def __init__(self, lookup: Callable[[int], np.ndarray]) -> None:
        super().__init__()
        self.lookup = lookup

    def __missing__(self, code: int) -> np.ndarray:
        found = self[code] = self.lookup(code)
        return found


def assemble(
    pieces: BatchPieces, rows: int, pack: Pack, ids: Mapping[int, np.ndarray], pad_id: int
) -> dict[str, Any]:
    """The batch dict of ``rows`` rows from ``pieces`` (``ids[shard]``: that shard's token ids,
    a ``ShardIds``)."""
    size = pack.length
    p = pieces
    values = [a.tolist() for a in (p.row, p.column, p.first, p.end, p.start, p.shard, p.length)]
    buffer = np.empty((rows, size + 1), dtype=np.int64)
    found = _Rows(rows)
    starts: list[tuple[int, int]] = []  # (row, column) where a document starts, past column 0
    for i, (r, c, f, e, at, s, _) in enumerate(zip(*values, strict=True)):
        buffer[r, c : c + e - f] = ids[s][at : at + e - f]
        if f == 0 and c >= 1:
            starts.append((r, c))
        if c >= size:  # concat: the piece that starts at column L is only a label
            continue
        used = min(e - f, size - c)
        found.end[r], found.last[r] = c + used, i
        found.keys[r].append((*p.names[i], f, f + used))
        found.spans[r].append(used)
    if pack.mode == "concat":
        labels = buffer[:, 1:].copy()
        if pack.documents == "separate":  # where a document starts, the token before has no label
            for r, c in starts:
                labels[r, c - 1] = IGNORE
    else:
        for r, end in enumerate(found.end):
            buffer[r, end:] = pad_id
        labels = _labels(buffer, values, found, pack, ids)
    lengths = _segments(found, size, pack)
    return {
        "input_ids": buffer[:, :size],
        "labels": labels,
        "position_ids": _positions(found, size, pack),
        "cu_seqlens": np.cumsum([0, *lengths], dtype=np.int64).astype(np.int32),
        "max_seqlen": max(lengths, default=0),
        "__key__": found.keys,
    }


def _labels(
    buffer: np.ndarray,
    values: list[list[int]],
    found: _Rows,
    pack: Pack,
    ids: Mapping[int, np.ndarray],
) -> np.ndarray:
    """Labels of padded rows: each token's next in its document (the one after a piece's end
    read from the shard), -100 past a document's end and on padding; joined: the next token in
    the row, up to its last piece's end."""
    labels = buffer[:, 1:].copy()  # the next column: right inside a piece, fixed at its end
    labels[:, -1] = IGNORE
    for r, end in enumerate(found.end):
        labels[r, end:] = IGNORE
    joined = pack.documents == "joined"
    for i, (r, c, f, e, at, s, length) in enumerate(zip(*values, strict=True)):
        if joined and found.last[r] != i:
            continue
        labels[r, c + e - f - 1] = ids[s][at + e - f] if e < length else IGNORE
    return labels


def _segments(found: _Rows, size: int, pack: Pack) -> list[int]:
    """The length of each attention segment in the flattened batch, in order: a row's pieces
    (joined: its real tokens as one), then its padding as one of its own."""
    lengths: list[int] = []
    for spans, end in zip(found.spans, found.end, strict=True):
        if pack.documents == "joined":
            lengths.extend([end] if end else [])
        else:
            lengths.extend(n for n in spans if n)
        if end < size:
            lengths.append(size - end)
    return lengths


def _positions(found: _Rows, size: int, pack: Pack) -> np.ndarray:
    """Position ids: from 0 at each piece's first token and at the padding (separate), else
    0..L-1."""
    count = np.arange(size, dtype=np.int64)
    if pack.documents == "joined":
        return np.tile(count, (len(found.end), 1))
    positions = np.empty((len(found.end), size), dtype=np.int64)
    for r, (spans, end) in enumerate(zip(found.spans, found.end, strict=True)):
        column = 0
        for n in spans:
            positions[r, column : column + n] = count[:n]
            column += n
        positions[r, end:] = count[: size - end]
    return positions


def split_batches(pieces: BatchPieces, sizes: list[int]) -> list[BatchPieces]:
    """Pieces of consecutive batches of ``sizes`` rows (sorted by row), each batch's apart with
    its rows counted from 0: several batches are found at once, each assembled alone."""
    if len(sizes) == 1:
        return [pieces]
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    at = np.searchsorted(pieces.row, bounds).tolist()
    out = []
    for b, first_row in enumerate(bounds[:-1].tolist()):
        lo, hi = at[b], at[b + 1]
        arrays = [getattr(pieces, name)[lo:hi] for name in ARRAYS]
        arrays[0] = arrays[0] - first_row
        out.append(BatchPieces(*arrays, pieces.names[lo:hi]))
    return out
