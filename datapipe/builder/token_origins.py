"""Where each document of a token shard came from: its source file and row, for the shard's
documents table (formats/tokens/docs.py).

A partition knows its rows' place in the partition only; their row in the file follows the rows
of the file's partitions before it, which only the measure pass counts. So the encode passes
record the partition's row (``origins``) and the write pass, which runs after the measure, moves
it to the file's (``from_first_row``), as the quarantine numbers rows: from 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from datapipe.builder.source.base import Part, Source
from datapipe.formats.encoded import EncodedSamples
from datapipe.formats.tokens.writer import ROW, SOURCE, TokenRows


def origins(source: Source, part: Part, rows: Sequence[int]) -> dict[str, list[Any]]:
    """The ``__source__`` and ``__row__`` columns of a partition's documents (``rows``: their row
    in the partition); a 'files' partition's rows are files: each is its own source, no row."""
    if part.members:
        return {SOURCE: [source.files[part.members[r]].label for r in rows]}
    return {SOURCE: [source.files[part.file].label] * len(rows), ROW: [int(r) for r in rows]}


def first_rows(parts: Sequence[Part], rows_in: Sequence[int]) -> list[int]:
    """Each partition's first row in its file: the rows (``rows_in``, in source order) of the
    file's partitions before it."""
    seen: dict[int, int] = {}
    out = []
    for part, rows in zip(parts, rows_in, strict=True):
        out.append(seen.get(part.file, 0))
        seen[part.file] = out[-1] + rows
    return out


def from_first_row(block: EncodedSamples, first_row: int) -> EncodedSamples:
    """``block`` with its documents' rows counted in their file from 1, not in their partition
    from 0; a block of another format, or without rows, as it is."""
    rows = block.rows
    if not isinstance(rows, TokenRows):
        return block
    table = rows.documents
    moved = np.where(table.row >= 0, table.row + (first_row + 1), table.row)
    return replace(block, rows=TokenRows(rows.dtype, replace(table, row=moved)))
