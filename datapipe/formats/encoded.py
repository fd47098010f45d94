"""Samples already encoded for one shard format: their bytes back to back, with the index rows that
describe them.

A build encodes each partition's samples where the partition is (in parallel, column-wise where
the format allows) and moves these blocks, not per-sample dicts, to the task that writes a shard;
the writer appends a block with one write and array appends (``ShardWriter.write_encoded``).
The bytes are exactly what ``ShardWriter.write`` would emit for the same samples.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Protocol

import numpy as np

from datapipe.formats.index import HASH_SIZE, IndexBuilder, ShardIndex


class SampleRows(Protocol):
    """What a format keeps of each sample outside the shard's bytes (the token format's documents
    table), carried by an encoded block and taken, moved and joined with its samples."""

    def __len__(self) -> int: ...

    def take(self, order: np.ndarray) -> SampleRows:
        """The rows at positions ``order``, in that order."""
        ...

    def join(self, parts: Sequence[SampleRows]) -> SampleRows:
        """These rows followed by each of ``parts``' rows."""
        ...


@dataclass(frozen=True, eq=False)
class EncodedSamples:
    """``n`` encoded samples: sample i is ``data[bounds[i]:bounds[i + 1]]``; member offsets are
    relative to ``data``. ``rows``: what the format keeps of them beside the shard (None for tar
    and TFRecord)."""

    # or any buffer (a PickleBuffer after a move between processes)
    data: bytes | bytearray | memoryview
    bounds: np.ndarray  # int64, n + 1
    hashes: np.ndarray  # uint8 (n, 32): sha256 of each sample's bytes
    member_counts: np.ndarray  # int64, n
    member_offset: np.ndarray  # int64, m: payload offsets within data
    member_size: np.ndarray  # int64, m
    member_field: np.ndarray  # int64, m: positions in ``fields``
    fields: tuple[str, ...]
    key_blob: bytes  # the UTF-8 keys back to back
    key_ends: np.ndarray  # int64, n
    rows: SampleRows | None = None

    def __len__(self) -> int:
        return len(self.member_counts)

    @classmethod
    def from_index(cls, data: bytes, index: ShardIndex) -> EncodedSamples:
        """The block of every sample of a shard held in ``data`` and described by ``index``."""
        starts = index.sample_start.astype(np.int64)
        return cls(
            data=data,
            bounds=np.append(starts, len(data)),
            hashes=index.sample_hash,
            member_counts=np.diff(index.sample_members.astype(np.int64)),
            member_offset=index.member_offset.astype(np.int64),
            member_size=index.member_size.astype(np.int64),
            member_field=index.member_field.astype(np.int64),
            fields=index.fields,
            key_blob=index.key_blob,
            key_ends=index.key_ends.astype(np.int64),
        )

    def add_to_index(self, index: IndexBuilder, offset: int) -> None:
        """Record these samples in ``index``, the block having been written at byte ``offset`` of
        the shard."""
        index.extend(
            starts=self.bounds[:-1] + offset,
            ends=self.bounds[1:] + offset,
            hashes=self.hashes,
            member_counts=self.member_counts,
            member_offsets=self.member_offset + offset,
            member_sizes=self.member_size,
            member_fields=self.member_field,
            fields=self.fields,
            key_blob=self.key_blob,
            key_ends=self.key_ends,
        )

    def __reduce__(self) -> tuple:
        # the bytes as an out-of-band buffer: Dask moves them between workers without a pickle copy,
        # and a block that is a view of a bigger one (``take`` of a run) is copied only when it
        # moves
        values = [getattr(self, f.name) for f in fields(self)]
        values[0] = pickle.PickleBuffer(self.data)
        return EncodedSamples, tuple(values)

    def _run(self, a: int, b: int) -> EncodedSamples:
        """Samples ``a`` to ``b - 1``: slices, no per-sample work."""
        first_member = int(self.member_counts[:a].sum())
        members = slice(first_member, first_member + int(self.member_counts[a:b].sum()))
        start, key_start = int(self.bounds[a]), int(self.key_ends[a - 1]) if a else 0
        return EncodedSamples(
            data=memoryview(self.data)[start : int(self.bounds[b])],
            bounds=self.bounds[a : b + 1] - start,
            hashes=self.hashes[a:b],
            member_counts=self.member_counts[a:b],
            member_offset=self.member_offset[members] - start,
            member_size=self.member_size[members],
            member_field=self.member_field[members],
            fields=self.fields,
            key_blob=self.key_blob[key_start : int(self.key_ends[b - 1])],
            key_ends=self.key_ends[a:b] - key_start,
            rows=None if self.rows is None else self.rows.take(np.arange(a, b)),
        )

    def take(self, order: np.ndarray) -> EncodedSamples:
        """The samples at positions ``order``, in that order (one copy of their bytes)."""
        order = np.asarray(order, dtype=np.int64)
        if len(order) and (np.diff(order) == 1).all():  # a run of consecutive samples: slices
            return self._run(int(order[0]), int(order[-1]) + 1)
        view = memoryview(self.data)
        starts, ends = self.bounds[:-1][order], self.bounds[1:][order]
        data = bytearray().join(
            [view[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
        )
        sizes = ends - starts
        bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        first_member = np.concatenate([[0], np.cumsum(self.member_counts)])[:-1]
        counts = self.member_counts[order]
        members = _ranges(first_member[order], counts)
        shift = np.repeat(bounds[:-1] - starts, counts)  # each payload moves with its sample
        key_starts = np.concatenate([[0], self.key_ends[:-1]])
        key_view = memoryview(self.key_blob)
        keys = b"".join(
            [
                key_view[a:b]
                for a, b in zip(
                    key_starts[order].tolist(), self.key_ends[order].tolist(), strict=True
                )
            ]
        )
        return EncodedSamples(
            data=data,
            bounds=bounds,
            hashes=self.hashes[order],
            member_counts=counts,
            member_offset=self.member_offset[members] + shift,
            member_size=self.member_size[members],
            member_field=self.member_field[members],
            fields=self.fields,
            key_blob=keys,
            key_ends=np.cumsum(self.key_ends[order] - key_starts[order]).astype(np.int64),
            rows=None if self.rows is None else self.rows.take(order),
        )


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The concatenation of range(s, s + c) for each start and count."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    return np.repeat(starts - (ends - counts), counts) + np.arange(total)


def in_output_order(pieces: Sequence[tuple[np.ndarray, EncodedSamples]]) -> list[EncodedSamples]:
    """Blocks whose samples, written in this order, follow the output positions given with each
    piece.

    Unshuffled builds give runs of consecutive positions: the pieces are only sorted. A shuffled
    build interleaves its pieces' samples, which are gathered into one block in position order.
    """
    pieces = sorted((p for p in pieces if len(p[1])), key=lambda p: int(p[0][0]))
    positions = [pos for pos, _ in pieces]
    if all((np.diff(pos) > 0).all() for pos in positions) and all(
        a[-1] < b[0] for a, b in zip(positions, positions[1:], strict=False)
    ):
        return [block for _, block in pieces]
    merged = _concat([block for _, block in pieces])
    return [merged.take(np.argsort(np.concatenate(positions), kind="stable"))]


def _concat(blocks: Sequence[EncodedSamples]) -> EncodedSamples:
    """One block holding ``blocks`` back to back (same fields in each)."""
    if len(blocks) == 1:
        return blocks[0]
    fields = blocks[0].fields
    if any(b.fields != fields for b in blocks):
        raise ValueError("blocks with different field lists cannot be merged")
    data_starts = np.cumsum([0] + [memoryview(b.data).nbytes for b in blocks])[:-1]
    key_starts = np.cumsum([0] + [len(b.key_blob) for b in blocks])[:-1]
    return EncodedSamples(
        data=b"".join(b.data for b in blocks),
        bounds=np.concatenate(
            [b.bounds[:-1] + s for b, s in zip(blocks, data_starts, strict=True)]
            + [[data_starts[-1] + memoryview(blocks[-1].data).nbytes]]
        ).astype(np.int64),
        hashes=np.concatenate([b.hashes for b in blocks]).reshape(-1, HASH_SIZE),
        member_counts=np.concatenate([b.member_counts for b in blocks]),
        member_offset=np.concatenate(
            [b.member_offset + s for b, s in zip(blocks, data_starts, strict=True)]
        ),
        member_size=np.concatenate([b.member_size for b in blocks]),
        member_field=np.concatenate([b.member_field for b in blocks]),
        fields=fields,
        key_blob=b"".join(b.key_blob for b in blocks),
        key_ends=np.concatenate([b.key_ends + s for b, s in zip(blocks, key_starts, strict=True)]),
        rows=None if blocks[0].rows is None else blocks[0].rows.join([b.rows for b in blocks[1:]]),
    )
