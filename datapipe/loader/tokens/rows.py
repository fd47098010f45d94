"""A batch of packed rows from its pieces: input_ids, labels, position_ids, cu_seqlens,
max_seqlen and the pieces each row holds (docs/guide/loading.md#packed-sequences).

Every step is one vectorised pass over the batch's pieces; token ids are gathered shard by shard
straight from the mapped ``.bin`` files into int64 rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.loader.tokens.pack import Pack

IGNORE = -100  # the label torch's cross entropy skips


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


def assemble(
    pieces: BatchPieces, rows: int, pack: Pack, ids: Callable[[int], np.ndarray], pad_id: int
) -> dict[str, Any]:
    """The batch dict of ``rows`` rows from ``pieces`` (``ids(shard)``: that shard's token ids)."""
    size = pack.length
    concat = pack.mode == "concat"
    p = pieces
    count = p.end - p.first
    inside = p.column < size  # concat: the piece that starts at column L is only a label
    used = np.minimum(count, size - p.column)
    real_end = np.zeros(rows, dtype=np.int64)
    row_in, end_in = p.row[inside], (p.column + used)[inside]
    last = np.flatnonzero(np.r_[row_in[1:] != row_in[:-1], True]) if len(row_in) else row_in
    real_end[row_in[last]] = end_in[last]  # pieces come sorted by row and column
    # a slice copy a piece, straight from the mapped ids (a loop over pieces, not tokens)
    buffer = np.empty((rows, size + 1), dtype=np.int64)
    arrays = {s: ids(s) for s in np.unique(p.shard).tolist()}
    spans = (a.tolist() for a in (p.row, p.column, count, p.start, p.shard))
    for r, c, n, f, s in zip(*spans, strict=True):
        buffer[r, c : c + n] = arrays[s][f : f + n]
    if concat:
        input_ids, labels = buffer[:, :size], buffer[:, 1:].copy()
        if pack.documents == "separate":  # where a document starts, the token before has no label
            starts = (p.first == 0) & (p.column >= 1)
            labels[p.row[starts], p.column[starts] - 1] = IGNORE
    else:
        for r, end in enumerate(real_end.tolist()):
            buffer[r, end:] = pad_id
        input_ids = buffer[:, :size]
        labels = _labels(buffer, p, count, real_end, pack, arrays)
    row, column, used = p.row[inside], p.column[inside], used[inside]
    lengths = _segments(row, used, real_end, size, pack)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    per_row: list[list[tuple[str, str, int, int]]] = [[] for _ in range(rows)]
    for i, r, f, u in zip(
        np.flatnonzero(inside).tolist(),
        row.tolist(),
        p.first[inside].tolist(),
        used.tolist(),
        strict=True,
    ):
        per_row[r].append((*p.names[i], f, f + u))
    return {
        "input_ids": input_ids,
        "labels": labels,
        "position_ids": _positions(rows, size, row, column, used, real_end, pack),
        "cu_seqlens": cu,
        "max_seqlen": int(lengths.max()) if len(lengths) else 0,
        "__key__": per_row,
    }


def _labels(
    buffer: np.ndarray,
    p: BatchPieces,
    count: np.ndarray,
    real_end: np.ndarray,
    pack: Pack,
    arrays: dict[int, np.ndarray],
) -> np.ndarray:
    """Labels of padded rows: each token's next in its document (the one after a piece's end
    read from the shard), -100 past a document's end and on padding; joined: the next token in
    the row."""
    labels = buffer[:, 1:].copy()  # the next column: right inside a piece, fixed at its end
    labels[:, -1] = IGNORE
    for r, end in enumerate(real_end.tolist()):
        labels[r, end:] = IGNORE
    last = p.column + count - 1
    ends = np.ones(len(count), dtype=bool)
    if pack.documents == "joined":  # only the row's last piece ends a label run
        ends = p.column + count == real_end[p.row]
    chosen = (a[ends].tolist() for a in (p.row, last, p.start, count, p.end, p.length, p.shard))
    for r, c, f, n, e, length, s in zip(*chosen, strict=True):
        labels[r, c] = arrays[s][f + n] if e < length else IGNORE
    return labels


def _segments(
    row: np.ndarray, used: np.ndarray, real_end: np.ndarray, size: int, pack: Pack
) -> np.ndarray:
    """The length of each attention segment in the flattened batch, in order: the pieces (joined:
    a row's real tokens as one), then each row's padding as one of its own."""
    rows = len(real_end)
    if pack.documents == "joined":
        seg_row, seg_len = np.arange(rows), real_end
    else:
        seg_row, seg_len = row, used
    pad = size - real_end
    all_rows = np.concatenate([seg_row, np.flatnonzero(pad > 0)])
    all_len = np.concatenate([seg_len, pad[pad > 0]])
    keep = all_len > 0
    order = np.argsort(all_rows[keep], kind="stable")  # padding after its row's pieces
    return all_len[keep][order]


def _positions(
    rows: int,
    size: int,
    row: np.ndarray,
    column: np.ndarray,
    used: np.ndarray,
    real_end: np.ndarray,
    pack: Pack,
) -> np.ndarray:
    """Position ids: from 0 at each piece's first token and at the padding (separate), else
    0..L-1."""
    count = np.arange(size, dtype=np.int64)
    if pack.documents == "joined":
        return np.tile(count, (rows, 1))
    positions = np.empty((rows, size), dtype=np.int64)
    for r, c, n in zip(row.tolist(), column.tolist(), used.tolist(), strict=True):
        positions[r, c : c + n] = count[:n]
    for r, end in enumerate(real_end.tolist()):
        positions[r, end:] = count[: size - end]
    return positions
