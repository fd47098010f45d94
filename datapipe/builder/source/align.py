"""CSV alignment: cut quoted CSV files only between records, from a quote scan of each nominal
block."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from datapipe.builder.source.base import ANCHOR_EVERY, ANCHOR_TAIL, InputFile, Part, Source

SCAN_CHUNK = 8 << 20


@dataclass(frozen=True)
class BlockScan:
    """Where a nominal block's quote parity flips: what ``align_parts`` needs to cut a file between
    records."""

    parity: int  # number of quote bytes in the block, mod 2
    # absolute offset of the first newline after an even number of the block's quotes, or -1
    first_even: int
    first_odd: int  # the same after an odd number, or -1
    # per parity (even, odd): the first anchor line's newline in the block's first half
    # (``base.line_cut``), and the first newline past that half; -1 where none
    anchor: tuple[int, int] = (-1, -1)
    late: tuple[int, int] = (-1, -1)


def scan_block(fs: Any, path: str, start: int, length: int, quote: int) -> BlockScan:
    """Quote parity and first newline of each parity in bytes [start, start + length) of ``path`` (a
    worker task)."""
    parity, first, quote_byte = 0, [-1, -1], bytes([quote])
    with fs.open(path, "rb") as handle:
        handle.seek(start)
        pos, left = start, length
        while left > 0:
            chunk = handle.read(min(SCAN_CHUNK, left))
            if not chunk:
                break
            # only the parity is left to count: bytes.count, no arrays
            if first[0] >= 0 and first[1] >= 0:
                parity ^= chunk.count(quote_byte) & 1
            # one parity all through the chunk: its first newline, by memchr
            elif quote_byte not in chunk:
                if first[parity] < 0 and (newline := chunk.find(b"\n")) >= 0:
                    first[parity] = pos + newline
            else:
                data = np.frombuffer(chunk, dtype=np.uint8)
                # quote parity after each byte (a uint8 sum wraps at 256, an even number, so parity
                # survives)
                after = (np.cumsum(data == quote, dtype=np.uint8) & 1) ^ parity
                newlines = np.flatnonzero(data == 10)
                for p in (0, 1):
                    if first[p] < 0:
                        hits = newlines[after[newlines] == p]
                        if len(hits):
                            first[p] = pos + int(hits[0])
                parity = int(after[-1])
            pos, left = pos + len(chunk), left - len(chunk)
        anchor, late = _anchors(handle, start, length, quote)
    return BlockScan(parity, first[0], first[1], anchor, late)


def _anchors(
    handle: Any, start: int, length: int, quote: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Per parity of the block's quotes before it: the first anchor newline in the block's first
    half, and the first newline after that half (where no anchor came), read from ``handle``."""
    target = start + max(length // 2, 1)
    anchor, late = [-1, -1], [-1, -1]
    at = max(start - ANCHOR_TAIL, 0)
    handle.seek(at)
    data, parity, pos = handle.read(start - at), 0, start
    while pos < start + length and not all(
        a >= 0 or b >= 0 for a, b in zip(anchor, late, strict=True)
    ):
        chunk = handle.read(min(SCAN_CHUNK, start + length - pos))
        if not chunk:
            break
        data = data[-ANCHOR_TAIL:] + chunk if pos > start else data + chunk
        skip = len(data) - len(chunk)  # bytes of data before the chunk
        bytes_ = np.frombuffer(chunk, dtype=np.uint8)
        after = (np.cumsum(bytes_ == quote, dtype=np.uint8) & 1) ^ parity
        newlines = np.flatnonzero(bytes_ == 10)
        for p in (0, 1):
            hits = newlines[after[newlines] == p] + pos
            for q in hits[hits < target].tolist() if anchor[p] < 0 else ():
                i = q - pos + skip
                if zlib.crc32(data[max(i + 1 - ANCHOR_TAIL, 0) : i + 1]) % ANCHOR_EVERY == 0:
                    anchor[p] = q
                    break
            beyond = hits[hits >= target]
            if late[p] < 0 and len(beyond):
                late[p] = int(beyond[0])
        parity, pos = int(after[-1]) if len(after) else parity, pos + len(chunk)
    return (anchor[0], anchor[1]), (late[0], late[1])


def scans_needed(source: Source) -> list[tuple[int, Part]]:
    """(file, nominal part) of every block whose quotes must be counted before the file can be
    cut."""
    return [(p.file, p) for p in source.parts if p.file in source.unaligned]


def align_parts(source: Source, scans: Sequence[BlockScan]) -> Source:
    """The source with every quoted CSV file cut only at newlines outside quotes, from ``scans`` of
    ``scans_needed(source)`` in that order.

    A nominal boundary at byte s moves to just after the first newline at or after s that follows
    an even number of quote bytes since the start of the file (RFC 4180 quoting: a doubled quote
    counts twice). Which blocks were nominal does not matter: the cuts are all record boundaries, so
    the records, and every byte after them, do not depend on the blocksize.
    """
    if not source.unaligned:
        return source
    by_file: dict[int, list[tuple[Part, BlockScan]]] = {}
    for (i, part), scan in zip(scans_needed(source), scans, strict=True):
        by_file.setdefault(i, []).append((part, scan))
    parts: list[Part] = []
    for p in source.parts:
        if p.file not in by_file:
            parts.append(Part(len(parts), p.file, p.start, p.length, p.row_group, p.members))
        elif p.start == 0:
            parts.extend(_aligned(source.files[p.file], p.file, by_file[p.file], len(parts)))
    return replace(source, parts=tuple(parts), unaligned=())


def align_here(source: Source) -> Source:
    """``align_parts`` with the quote scans run in this process (the build runs them on the
    cluster)."""
    return align_parts(
        source,
        [
            scan_block(source.fs, source.files[i].path, p.start, p.length or 0, source.quote or 0)
            for i, p in scans_needed(source)
        ],
    )


def align_on(run: Callable[[str, list[Any]], list[BlockScan]], source: Source) -> Source:
    """``align_parts`` with the quote scans run as a pass of ``run`` (the build's PassRunner): one
    quote-counting task per nominal block."""
    needed = scans_needed(source)
    if not needed:
        return source
    from dask import delayed

    scan = delayed(scan_block, pure=False)
    tasks = [
        scan(source.fs, source.files[i].path, p.start, p.length, source.quote) for i, p in needed
    ]
    return align_parts(source, run("find record boundaries", tasks))


def _aligned(
    f: InputFile, index: int, blocks: list[tuple[Part, BlockScan]], first: int
) -> list[Part]:
    parities = [0]
    for _, scan in blocks:
        parities.append(parities[-1] ^ scan.parity)

    def record_end(j: int) -> int | None:
        """Just past the first anchor line outside quotes in block j's first half, else the first
        newline outside quotes after it (``base.line_cut``'s rule, in record boundaries)."""
        scan = blocks[j][1]
        hit = scan.anchor[parities[j]] if scan.anchor[parities[j]] >= 0 else scan.late[parities[j]]
        if hit >= 0:
            return hit + 1
        for k in range(j + 1, len(blocks)):
            scan = blocks[k][1]
            hit = scan.first_odd if parities[k] else scan.first_even
            if hit >= 0:
                return hit + 1
        return None

    cuts = sorted(
        {
            0,
            *(
                c
                for c in (record_end(j) for j in range(1, len(blocks)))
                if c is not None and c < f.size
            ),
        }
    )
    ends = [*cuts[1:], f.size]
    return [
        Part(first + n, index, start, end - start, exact=True)
        for n, (start, end) in enumerate(zip(cuts, ends, strict=True))
    ]
