"""Writes WebDataset tar shards: members '<key>.<field>' grouped by key, fields sorted, bytes
deterministic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from hashlib import sha256
from typing import Any

import numpy as np

from datapipe.errors import SampleError
from datapipe.formats.base import ShardWriter
from datapipe.formats.encoded import EncodedSamples
from datapipe.formats.index import HASH_SIZE
from datapipe.formats.tar.headers import (
    BLOCK,
    END_OF_ARCHIVE,
    MAX_USTAR_SIZE,
    USTAR_TEMPLATE,
    USTAR_TEMPLATE_SUM,
    member_header,
    padding,
)

TAR_FORMAT_CODE = 1
_PADDING = [bytes(n) for n in range(BLOCK)]


class TarShardWriter(ShardWriter):
    """A WebDataset tar writer. Payloads must be bytes-like; keys may not contain '.'.

    The archive ends with the two zero blocks of the tar standard and no further record padding.
    """

    format_code = TAR_FORMAT_CODE
    allow_dots_in_keys = False
    encodes_columns = True

    def _write_sample(
        self, key: str, fields: dict[str, Any], sample_sha: Any
    ) -> list[tuple[str, int, int]]:
        members = []
        parts: list[Any] = []
        pos = self._pos
        for name, value in fields.items():
            try:
                payload = memoryview(value).cast("B")
            except TypeError:
                raise SampleError(
                    f"sample {key!r}, field {name!r}: the tar format stores bytes, got "
                    f"{type(value).__name__}; "
                    "encode the value first"
                ) from None
            size = len(payload)
            header = member_header(f"{key}.{name}", size)
            members.append((name, pos + len(header), size))
            parts += (header, payload, _PADDING[-size % BLOCK])
            pos += len(header) + size + (-size % BLOCK)
        record = b"".join(parts)  # one write and one hash update per sample
        self._emit(record)
        sample_sha.update(record)
        return members

    end_size = len(END_OF_ARCHIVE)

    @classmethod
    def sample_size(cls, key: str, fields: Mapping[str, Any]) -> int:
        """Header (pax included), payload and padding of every member."""
        total = 0
        for name, value in fields.items():
            size = memoryview(value).nbytes
            total += len(member_header(f"{key}.{name}", size)) + size + len(padding(size))
        return total

    @classmethod
    def sample_sizes(cls, keys: Sequence[str], fields: Mapping[str, Sequence[Any]]) -> np.ndarray:
        """Vectorised: plain ustar members (ASCII names of 100 bytes or less) cost 512 + padded
        payload."""
        n = len(keys)
        key_len = np.fromiter(
            (len(k) if k.isascii() else 1000 for k in keys), dtype=np.int64, count=n
        )
        total = np.zeros(n, dtype=np.int64)
        plain = np.ones(n, dtype=bool)
        for name, payloads in fields.items():
            size = np.fromiter((memoryview(p).nbytes for p in payloads), dtype=np.int64, count=n)
            total += BLOCK + size + (-size % BLOCK)
            plain &= (
                (key_len + 1 + len(name.encode()) <= 100)
                & (size <= MAX_USTAR_SIZE)
                & name.isascii()
            )
        # long or non-ASCII names, huge payloads: pax headers
        for i in np.flatnonzero(~plain).tolist():
            total[i] = cls.sample_size(
                keys[i], {name: payloads[i] for name, payloads in fields.items()}
            )
        return total

    @classmethod
    def encode_samples(
        cls, keys: Sequence[str], fields: Mapping[str, Sequence[Any]]
    ) -> EncodedSamples:
        """Column-wise: headers of plain ustar members built as one numpy array, payloads copied
        into place.

        Samples that need pax headers (long or non-ASCII names, huge payloads) take the general
        path.
        """
        names = sorted(fields)
        plain = _plain_members(keys, fields, names)
        if plain is None:
            return super().encode_samples(keys, fields)
        key_bytes, key_len, sizes, name_len = plain
        n, f = sizes.shape
        # member j of sample i is row i * f + j; each is a header block, the payload, zero padding
        spans = BLOCK + sizes.reshape(-1) + (-sizes.reshape(-1) % BLOCK)
        ends = np.cumsum(spans)
        header_at = ends - spans
        data = bytearray(int(ends[-1]))
        flat = np.frombuffer(data, dtype=np.uint8)
        _write_headers(flat, header_at, key_bytes, names, name_len, sizes)
        payload_at = header_at + BLOCK
        for i, name in enumerate(names):
            _place(flat, payload_at[i::f], sizes[:, i], fields[name])
        bounds = np.concatenate([[0], ends[f - 1 :: f]]).astype(np.int64)
        view = memoryview(data)
        hashes = b"".join(
            [
                sha256(view[a:b]).digest()
                for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
            ]
        )
        return EncodedSamples(
            data=data,
            bounds=bounds,
            hashes=np.frombuffer(hashes, dtype=np.uint8).reshape(n, HASH_SIZE),
            member_counts=np.full(n, f, dtype=np.int64),
            member_offset=payload_at,
            member_size=sizes.reshape(-1),
            member_field=np.tile(np.arange(f), n),
            fields=tuple(names),
            key_blob=b"".join(key_bytes),
            key_ends=np.cumsum(key_len),
        )

    def _write_end(self) -> None:
        self._emit(END_OF_ARCHIVE)


def _plain_members(
    keys: Sequence[str], fields: Mapping[str, Sequence[Any]], names: list[str]
) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray] | None:
    """The encoded keys, their lengths, and the payload sizes and member name lengths (a row per
    sample, a column per field of ``names``) when every member is plain ustar (bytes payloads, an
    ASCII name of 100 bytes or less, a size ustar can write); None when some member is not."""
    n, f = len(keys), len(names)
    if not n or not f or any(set(map(type, fields[name])) != {bytes} for name in names):
        return None
    key_bytes = [k.encode("utf-8", "surrogateescape") for k in keys]
    key_len = np.fromiter(map(len, key_bytes), dtype=np.int64, count=n)
    sizes = np.stack(
        [np.fromiter(map(len, fields[name]), dtype=np.int64, count=n) for name in names], axis=1
    )
    name_len = key_len[:, None] + 1 + np.array([len(name.encode()) for name in names])
    if (
        (name_len > 100).any()
        or (sizes > MAX_USTAR_SIZE).any()
        or not all(name.isascii() for name in names)
        or not b"".join(key_bytes).isascii()
    ):
        return None
    return key_bytes, key_len, sizes, name_len


def _write_headers(
    flat: np.ndarray,
    header_at: np.ndarray,
    key_bytes: list[bytes],
    names: list[str],
    name_len: np.ndarray,
    sizes: np.ndarray,
) -> None:
    """The ustar header of every member (``KEY.FIELD``, in rows of samples) at ``header_at`` of
    ``flat``: the template, then each header's own name, size, typeflag and checksum."""
    blocks, rows = flat.reshape(-1, BLOCK), header_at // BLOCK
    blocks[rows] = np.frombuffer(USTAR_TEMPLATE, dtype=np.uint8)
    suffixes = [b"." + name.encode() for name in names]
    blob = np.frombuffer(
        b"".join([k + suffix for k in key_bytes for suffix in suffixes]), dtype=np.uint8
    )
    lengths = name_len.reshape(-1)
    starts = np.cumsum(lengths) - lengths
    flat[np.repeat(header_at - starts, lengths) + np.arange(len(blob))] = blob  # name
    size_digits = ((sizes.reshape(-1, 1) >> (3 * np.arange(10, -1, -1))) & 7) + ord("0")
    blocks[rows, 124:135] = size_digits  # size: 11 octal digits and the template's NUL
    blocks[rows, 156] = ord("0")  # typeflag: regular file
    name_sums = np.add.reduceat(blob.astype(np.int64), starts)
    checksum = USTAR_TEMPLATE_SUM + ord("0") + name_sums + size_digits.sum(axis=1)
    blocks[rows, 148:156] = np.concatenate(
        [
            ((checksum[:, None] >> (3 * np.arange(5, -1, -1))) & 7) + ord("0"),
            np.broadcast_to([0, ord(" ")], (len(rows), 2)),
        ],
        axis=1,
    )


STRIDED_BELOW = 16 << 10  # payload size from which each payload is copied into place by itself


def _place(flat: np.ndarray, at: np.ndarray, sizes: np.ndarray, payloads: Sequence[bytes]) -> None:
    """Copy ``payloads`` to offsets ``at`` of ``flat``: as one strided copy when they are small, all
    of one size and at evenly spaced offsets (samples of one shape: the usual case), else one slice
    assignment each."""
    n = len(payloads)
    size, stride = int(sizes[0]), int(at[1] - at[0]) if n > 1 else 0
    # (the strided copy goes through one joined copy of the payloads: worth it only where a slice
    # assignment per payload costs more in Python than the extra copy of its bytes)
    if (
        n > 1
        and 0 < size < STRIDED_BELOW
        and stride >= size
        and (sizes == size).all()
        and (np.diff(at) == stride).all()
    ):
        rows = np.lib.stride_tricks.as_strided(
            flat[int(at[0]) :], shape=(n, size), strides=(stride, 1)
        )
        rows[:] = np.frombuffer(b"".join(payloads), dtype=np.uint8).reshape(n, size)
        return
    data = flat.data
    for start, payload in zip(at.tolist(), payloads, strict=True):
        data[start : start + len(payload)] = payload
