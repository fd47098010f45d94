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
from datapipe.loader.tokens.window import _ranges

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


def _gather(
    flat: np.ndarray,
    dst: np.ndarray,
    src: np.ndarray,
    count: np.ndarray,
    shard: np.ndarray,
    ids: Callable[[int], np.ndarray],
) -> None:
    """Copy ``count[i]`` ids of shard ``shard[i]`` from ``src[i]`` to ``flat[dst[i]:]``."""
    for s in np.unique(shard).tolist():
        mine = shard == s
        _, to = _ranges(dst[mine], count[mine])
        _, fro = _ranges(src[mine], count[mine])
        flat[to] = ids(s)[fro]


def assemble(
    pieces: BatchPieces, rows: int, pack: Pack, ids: Callable[[int], np.ndarray], pad_id: int
) -> dict[str, Any]:
    """The batch dict of ``rows`` rows from ``pieces`` (``ids(shard)``: that shard's token ids)."""
    size = pack.length
    concat = pack.mode == "concat"
    width = size + 1 if concat else size
    buffer = np.full((rows, width), pad_id, dtype=np.int64)
    p = pieces
    count = p.end - p.first
    _gather(buffer.reshape(-1), p.row * width + p.column, p.start, count, p.shard, ids)
    inside = p.column < size  # concat: the piece that starts at column L is only a label
    used = np.minimum(count, size - p.column)[inside]
    row, column = p.row[inside], p.column[inside]
    real_end = np.zeros(rows, dtype=np.int64)
    np.maximum.at(real_end, row, column + used)
    if concat:
        input_ids, labels = buffer[:, :size], buffer[:, 1:].copy()
        if pack.documents == "separate":  # where a document starts, the token before has no label
            starts = (p.first == 0) & (p.column >= 1)
            labels[p.row[starts], p.column[starts] - 1] = IGNORE
    else:
        input_ids = buffer
        labels = _labels(input_ids, p, count, real_end, pack, ids)
    lengths, owners = _segments(row, used, real_end, size, pack)
    positions = _positions(rows, size, row, column, used, real_end, pack)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    keyed = [
        (*p.names[i], int(f), int(f + u))
        for i, f, u in zip(
            np.flatnonzero(inside).tolist(), p.first[inside].tolist(), used.tolist(), strict=True
        )
    ]
    per_row: list[list[tuple[str, str, int, int]]] = [[] for _ in range(rows)]
    for r, piece in zip(row.tolist(), keyed, strict=True):
        per_row[r].append(piece)
    return {
        "input_ids": input_ids,
        "labels": labels,
        "position_ids": positions,
        "cu_seqlens": cu,
        "max_seqlen": int(lengths.max()) if len(lengths) else 0,
        "__key__": per_row,
    }


def _labels(
    input_ids: np.ndarray,
    p: BatchPieces,
    count: np.ndarray,
    real_end: np.ndarray,
    pack: Pack,
    ids: Callable[[int], np.ndarray],
) -> np.ndarray:
    """Labels of padded rows: each token's next in its document (the one after a piece's end
    read from the shard), -100 past a document's end and on padding; joined: the next token in
    the row."""
    rows, size = input_ids.shape
    labels = np.full((rows, size), IGNORE, dtype=np.int64)
    flat_in, flat = input_ids.reshape(-1), labels.reshape(-1)
    if pack.documents == "joined":
        _, at = _ranges(np.arange(rows) * size, np.maximum(real_end - 1, 0))
        flat[at] = flat_in[at + 1]
    else:
        _, at = _ranges(p.row * size + p.column, count - 1)
        flat[at] = flat_in[at + 1]
    more = p.end < p.length  # the document goes on past the piece: its next token is the label
    last = p.row * size + p.column + count - 1
    if pack.documents == "joined":
        more &= p.column + count == real_end[p.row]
    nxt = np.zeros(int(more.sum()), dtype=np.int64)
    after = p.start[more] + count[more]
    _gather(nxt, np.arange(len(nxt)), after, np.ones_like(nxt), p.shard[more], ids)
    flat[last[more]] = nxt
    return labels


def _segments(
    row: np.ndarray, used: np.ndarray, real_end: np.ndarray, size: int, pack: Pack
) -> tuple[np.ndarray, np.ndarray]:
    """(length, row) of each attention segment in the flattened batch, in order: the pieces
    (joined: a row's real tokens as one), then each row's padding as one of its own."""
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
    return all_len[keep][order], all_rows[keep][order]


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
    positions = np.broadcast_to(np.arange(size, dtype=np.int64), (rows, size)).copy()
    if pack.documents == "joined":
        return positions
    flat = positions.reshape(-1)
    _, at = _ranges(row * size + column, used)
    owner = np.repeat(column, used)
    flat[at] -= owner
    pad = size - real_end
    _, at = _ranges(np.arange(rows) * size + real_end, pad)
    flat[at] -= np.repeat(real_end, pad)
    return positions
