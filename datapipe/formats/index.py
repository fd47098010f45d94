"""The random-access index of one shard: a little-endian binary sidecar ``<shard>.idx``.

Layout: schemas/shard-index.md. In short: a 64-byte header (magic, version, format, shard
size, counts), then per-sample spans, sha256s, key offsets and member ranges, per-member
payload offsets, sizes and field ids, the key and field-name blobs, and a CRC32C trailer.
Arrays are little-endian and 8-byte aligned, so they map straight into numpy.

Members are the tar entries holding payloads; TFRecord shards have none (m = 0) because a
record's features live inside its protobuf.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import crc32c
import numpy as np

from datapipe.errors import FormatVersionError, ShardCorruptError

MAGIC = b"DPIDX\x00\x00\x00"
VERSION = 1
_HEADER = struct.Struct("<8sIIQQQIIQQ")
_TRAILER = struct.Struct("<II")
HASH_SIZE = 32


def array_view(a: array | bytearray, dtype: type | np.dtype = np.uint64) -> np.ndarray:
    """A ``dtype`` view of the growing buffer ``a`` (frombuffer refuses an empty one)."""
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype)


def _pad8(n: int) -> int:
    return -n % 8


@dataclass(frozen=True, eq=False)
class ShardIndex:
    """Offsets, sizes, keys and hashes of every sample in one shard, held as numpy arrays."""

    format_code: int
    shard_size: int
    sample_start: np.ndarray
    sample_end: np.ndarray
    sample_hash: np.ndarray
    sample_members: np.ndarray
    member_offset: np.ndarray
    member_size: np.ndarray
    member_field: np.ndarray
    key_ends: np.ndarray
    key_blob: bytes
    fields: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.sample_start)

    def key(self, i: int) -> str:
        """The key of sample ``i``."""
        start = int(self.key_ends[i - 1]) if i else 0
        return self.key_blob[start : int(self.key_ends[i])].decode("utf-8", "surrogateescape")

    def keys(self) -> list[str]:
        """Every key, in shard order."""
        ends = self.key_ends.tolist()
        starts = [0, *ends][:-1]
        blob = self.key_blob
        return [
            blob[a:b].decode("utf-8", "surrogateescape") for a, b in zip(starts, ends, strict=True)
        ]

    def key_array(self) -> np.ndarray:
        """Every key as a numpy array, for gathers by batch: fixed-width bytes when the keys are
        ASCII of one length (the usual zero-padded counters: a view of the index, no str object per
        key until one is asked for, see ``ShardReader.gather_keys``), else an object array of
        str."""
        n, blob = len(self.key_ends), self.key_blob
        width = len(blob) // n if n else 0
        if width and len(blob) == width * n and blob.isascii() and b"\0" not in blob:
            if (self.key_ends == np.arange(width, len(blob) + 1, width)).all():
                return np.frombuffer(blob, dtype=f"S{width}")
        return np.array(self.keys(), dtype=object)

    def to_bytes(self) -> bytes:
        """Serialise in the documented layout, trailer included."""
        field_blob = b"".join(f.encode() for f in self.fields)
        field_ends = np.cumsum([len(f.encode()) for f in self.fields], dtype="<u8")
        header = _HEADER.pack(
            MAGIC,
            VERSION,
            self.format_code,
            self.shard_size,
            len(self),
            len(self.member_offset),
            len(self.fields),
            0,
            len(self.key_blob),
            len(field_blob),
        )
        parts = [header]
        for arr, dtype in (
            (self.sample_start, "<u8"),
            (self.sample_end, "<u8"),
            (self.sample_hash, "u1"),
            (self.sample_members, "<u8"),
            (self.member_offset, "<u8"),
            (self.member_size, "<u8"),
            (self.member_field, "<u4"),
            (self.key_ends, "<u8"),
            (field_ends, "<u8"),
        ):
            data = np.ascontiguousarray(arr, dtype=dtype).tobytes()
            parts += [data, bytes(_pad8(len(data)))]
        for blob in (self.key_blob, field_blob):
            parts += [blob, bytes(_pad8(len(blob)))]
        body = b"".join(parts)
        return body + _TRAILER.pack(crc32c.crc32c(body), 0)

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, name: str) -> ShardIndex:
        """Parse and validate an index; ``name`` (the index path) appears in every error."""
        code, shard_size, n, field_bytes, sections = _sections(memoryview(data).cast("B"), name)
        u8 = lambda b: np.frombuffer(b, dtype="<u8")  # noqa: E731
        field_blob = bytes(sections[10])
        field_ends = u8(sections[8]).tolist()
        try:
            names = tuple(
                field_blob[a:b].decode()
                for a, b in zip([0, *field_ends][:-1], field_ends, strict=True)
            )
        except UnicodeDecodeError:
            raise ShardCorruptError(name, "field names in the index are not UTF-8") from None
        index = cls(
            format_code=code,
            shard_size=shard_size,
            sample_start=u8(sections[0]),
            sample_end=u8(sections[1]),
            sample_hash=np.frombuffer(sections[2], dtype="u1").reshape(n, HASH_SIZE),
            sample_members=u8(sections[3]),
            member_offset=u8(sections[4]),
            member_size=u8(sections[5]),
            member_field=np.frombuffer(sections[6], dtype="<u4"),
            key_ends=u8(sections[7]),
            key_blob=bytes(sections[9]),
            fields=names,
        )
        index._check_consistent(name, field_ends, field_bytes)
        return index

    def _check_consistent(self, name: str, field_ends: list[int], field_bytes: int) -> None:
        """Reject an index whose numbers cannot describe a real shard (crc-valid garbage
        included)."""

        def bad(what: str) -> ShardCorruptError:
            return ShardCorruptError(
                name, f"inconsistent index: {what}; rebuild it with `datapipe index`"
            )

        size = self.shard_size
        if len(self) and (
            np.any(self.sample_start > self.sample_end)
            or np.any(self.sample_end > size)
            or np.any(self.sample_start[1:] < self.sample_end[:-1])
        ):
            raise bad("sample spans overlap or lie outside the shard")
        members = self.sample_members
        if (
            members[0] != 0
            or members[-1] != len(self.member_offset)
            or np.any(np.diff(members.astype(np.int64)) < 0)
        ):
            raise bad("member ranges")
        if len(self.member_offset) and (
            np.any(self.member_offset > size)
            or np.any(self.member_size > size - self.member_offset)
            or np.any(self.member_field >= len(self.fields))
        ):
            raise bad("member payloads outside the shard or unknown field ids")
        ends = self.key_ends
        if len(ends) and (
            np.any(np.diff(ends.astype(np.int64)) < 0) or ends[-1] != len(self.key_blob)
        ):
            raise bad("key table")
        if (field_ends[-1] if field_ends else 0) != field_bytes or field_ends != sorted(field_ends):
            raise bad("field-name table")

    def check_shard_size(self, shard_size: int, name: str) -> None:
        """Fail when the shard is not the size the index was built for (truncated, replaced)."""
        if shard_size != self.shard_size:
            raise ShardCorruptError(
                name,
                f"shard is {shard_size} bytes but its index describes "
                f"{self.shard_size}; the shard was "
                "truncated or replaced, or the index belongs to another file (rebuild "
                "it with `datapipe index`)",
            )


class IndexBuilder:
    """Collects samples as a writer or scanner meets them, then freezes them into a ShardIndex."""

    def __init__(self, format_code: int) -> None:
        self.format_code = format_code
        self._start = array("Q")
        self._end = array("Q")
        self._hashes = bytearray()
        self._members = array("Q", [0])
        self._offset = array("Q")
        self._size = array("Q")
        self._field = array("I")
        self._field_ids: dict[str, int] = {}
        self._keys = bytearray()
        self._key_ends = array("Q")

    def __len__(self) -> int:
        return len(self._start)

    def add(
        self,
        key: str,
        start: int,
        end: int,
        digest: bytes,
        members: Sequence[tuple[str, int, int]] = (),
        fields: Iterable[str] = (),
    ) -> None:
        """Record one sample: key, byte span, span sha256, (field, offset, size) members, and
        the names of fields that have no member of their own (TFRecord features)."""
        self._start.append(start)
        self._end.append(end)
        self._hashes += digest
        ids = self._field_ids
        for name in fields:
            ids.setdefault(name, len(ids))
        for field, offset, size in members:
            self._offset.append(offset)
            self._size.append(size)
            self._field.append(ids.setdefault(field, len(ids)))
        self._members.append(len(self._offset))
        self._keys += key.encode("utf-8", "surrogateescape")
        self._key_ends.append(len(self._keys))

    def extend(
        self,
        *,
        starts: np.ndarray,
        ends: np.ndarray,
        hashes: np.ndarray,
        member_counts: np.ndarray,
        member_offsets: np.ndarray,
        member_sizes: np.ndarray,
        member_fields: np.ndarray,
        fields: Sequence[str],
        key_blob: bytes,
        key_ends: np.ndarray,
    ) -> None:
        """Record many samples given as arrays: what ``add`` records for each, with array appends.

        Sample i spans ``starts[i]:ends[i]`` of the shard and has the sha256 ``hashes[i]`` (an n x
        32 uint8 array); its key is the UTF-8 of ``key_blob`` up to ``key_ends[i]``. Its
        ``member_counts[i]`` members follow those of sample i - 1 in ``member_offsets``,
        ``member_sizes`` and ``member_fields`` (positions in ``fields``).
        """
        ids = self._field_ids
        field_ids = np.array([ids.setdefault(f, len(ids)) for f in fields], dtype=np.uint32)
        u8 = lambda a: np.ascontiguousarray(a, dtype="<u8").tobytes()  # noqa: E731
        self._start.frombytes(u8(starts))
        self._end.frombytes(u8(ends))
        self._hashes += np.ascontiguousarray(hashes, dtype=np.uint8).tobytes()
        self._members.frombytes(u8(self._members[-1] + np.cumsum(member_counts)))
        self._offset.frombytes(u8(member_offsets))
        self._size.frombytes(u8(member_sizes))
        self._field.frombytes(field_ids[member_fields].astype("<u4").tobytes())
        self._key_ends.frombytes(u8(key_ends + len(self._keys)))
        self._keys += key_blob

    def build(self, shard_size: int) -> ShardIndex:
        """The finished index for a shard of ``shard_size`` bytes."""
        u8 = array_view
        return ShardIndex(
            format_code=self.format_code,
            shard_size=shard_size,
            sample_start=u8(self._start),
            sample_end=u8(self._end),
            sample_hash=np.frombuffer(bytes(self._hashes), dtype=np.uint8).reshape(-1, HASH_SIZE),
            sample_members=u8(self._members),
            member_offset=u8(self._offset),
            member_size=u8(self._size),
            member_field=np.frombuffer(self._field, dtype=np.uint32)
            if len(self._field)
            else np.zeros(0, np.uint32),
            key_ends=u8(self._key_ends),
            key_blob=bytes(self._keys),
            fields=tuple(self._field_ids),
        )


def _sections(data: memoryview, name: str) -> tuple[int, int, int, int, list[memoryview]]:
    """The header's format code, shard size, sample count and field-name bytes, and the index's
    sections, once its size, magic, format version and checksum are checked."""
    if len(data) < _HEADER.size + _TRAILER.size:
        raise ShardCorruptError(name, f"index is {len(data)} bytes, shorter than its header")
    magic, version, code, shard_size, n, m, f, _flags, key_bytes, field_bytes = _HEADER.unpack_from(
        data
    )
    if magic != MAGIC:
        raise ShardCorruptError(
            name, "not a datapipe index (bad magic); rebuild it with `datapipe index`"
        )
    if version != VERSION:
        raise FormatVersionError(
            f"{name}: index format version {version} is not supported (this datapipe reads "
            f"version {VERSION}); rebuild it with `datapipe index` or upgrade datapipe"
        )
    sizes = [8 * n, 8 * n, HASH_SIZE * n, 8 * (n + 1), 8 * m, 8 * m, 4 * m, 8 * n, 8 * f]
    sizes += [key_bytes, field_bytes]
    expected = _HEADER.size + sum(s + _pad8(s) for s in sizes) + _TRAILER.size
    if expected != len(data):
        raise ShardCorruptError(
            name, f"index is {len(data)} bytes but its header implies {expected}"
        )
    body_end = len(data) - _TRAILER.size
    (crc, zero) = _TRAILER.unpack_from(data, body_end)
    if crc32c.crc32c(data[:body_end]) != crc or zero != 0:
        raise ShardCorruptError(name, "index checksum mismatch; rebuild it with `datapipe index`")
    sections, pos = [], _HEADER.size
    for s in sizes:
        sections.append(data[pos : pos + s])
        pos += s + _pad8(s)
    return code, shard_size, n, field_bytes, sections
