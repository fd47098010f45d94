"""Cutting listed files into partitions, as pure functions of their sizes: byte blocks, row groups,
file groups."""

from __future__ import annotations

from collections.abc import Sequence

from datapipe.builder.source.base import InputFile, Part

# read whole: a compressed stream cannot be entered midway
COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".zip")


def byte_blocks(files: Sequence[InputFile], blocksize: int, whole: bool = False) -> list[Part]:
    """Nominal blocks of ``blocksize`` bytes of each text file (one part per file when ``whole``,
    compressed or empty); a reader moves each cut to the next record boundary."""
    parts = []
    for i, f in enumerate(files):
        if whole or f.path.endswith(COMPRESSED) or f.size == 0:
            parts.append(Part(len(parts), i))
            continue
        for start in range(0, f.size, blocksize):
            parts.append(Part(len(parts), i, start, blocksize))
    return parts


def row_group_parts(row_groups: Sequence[int]) -> list[Part]:
    """One part per row group, given the row groups of each file."""
    parts: list[Part] = []
    for i, groups in enumerate(row_groups):
        parts.extend(Part(len(parts), i, row_group=g) for g in range(groups))
    return parts


def file_groups(files: Sequence[InputFile], per_partition: int, max_bytes: int) -> list[Part]:
    """Runs of consecutive files, at most ``per_partition`` of them and ``max_bytes`` together (a
    larger file goes alone)."""
    parts: list[Part] = []
    group: list[int] = []
    size = 0
    for i, f in enumerate(files):
        if group and (len(group) >= per_partition or size + f.size > max_bytes):
            parts.append(Part(len(parts), group[0], members=tuple(group)))
            group, size = [], 0
        group.append(i)
        size += f.size
    if group:
        parts.append(Part(len(parts), group[0], members=tuple(group)))
    return parts
