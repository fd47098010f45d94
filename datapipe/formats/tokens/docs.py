"""The documents' table of a token shard (``NAME.docs``): keys, source rows and other fields.

Layout (schemas/token-shard.md), little-endian, every section padded to 8 bytes, as the shard
index: a 72-byte header (magic ``DPDOCS``, version, field count, source count, document count,
value count, blob sizes), then per document its source (uint32, ``NO_SOURCE`` when unknown), row
(int64, -1 when unknown), key end and value range, per value its field id and end in the value
blob, the key, value, field-name and source-name blobs, and a CRC32C trailer.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import crc32c
import numpy as np

from datapipe.errors import FormatVersionError, ShardCorruptError
from datapipe.formats.index import array_view

MAGIC = b"DPDOCS\x00\x00"
VERSION = 1
NO_SOURCE = 0xFFFFFFFF
_HEADER = struct.Struct("<8sIIIIQQQQQQ")
_TRAILER = struct.Struct("<II")


def _pad8(n: int) -> int:
    return -n % 8


def _names_blob(names: tuple[str, ...]) -> tuple[bytes, np.ndarray]:
    encoded = [n.encode("utf-8", "surrogateescape") for n in names]
    return b"".join(encoded), np.cumsum([len(e) for e in encoded], dtype="<u8")


def _split(blob: bytes, ends: np.ndarray) -> tuple[str, ...]:
    ends_list = ends.tolist()
    return tuple(
        blob[a:b].decode("utf-8", "surrogateescape")
        for a, b in zip([0, *ends_list][:-1], ends_list, strict=True)
    )


@dataclass(frozen=True, eq=False)
class DocumentTable:
    """What a token shard keeps of each document beside its tokens, as numpy arrays."""

    key_ends: np.ndarray  # uint64 [n]
    key_blob: bytes
    source: np.ndarray  # uint32 [n]: position in ``sources``, or NO_SOURCE
    row: np.ndarray  # int64 [n]: the row of its source, -1 when unknown
    value_ranges: np.ndarray  # uint64 [n + 1]: document i's values are value_ranges[i]:[i + 1]
    value_field: np.ndarray  # uint32 [m]: position in ``fields``
    value_ends: np.ndarray  # uint64 [m]: end of each value in ``blob`` (starts at the last end)
    blob: bytes
    fields: tuple[str, ...]
    sources: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.row)

    def key(self, i: int) -> str:
        """The key of document ``i``."""
        start = int(self.key_ends[i - 1]) if i else 0
        return self.key_blob[start : int(self.key_ends[i])].decode("utf-8", "surrogateescape")

    def origin(self, i: int) -> tuple[str | None, int | None]:
        """The source file and row document ``i`` came from (None where not recorded)."""
        source, row = int(self.source[i]), int(self.row[i])
        return (None if source == NO_SOURCE else self.sources[source]), (None if row < 0 else row)

    def values(self, i: int) -> list[tuple[str, int, int]]:
        """(field, start, end) in ``blob`` of each value of document ``i``, fields sorted."""
        a, b = int(self.value_ranges[i]), int(self.value_ranges[i + 1])
        ends = self.value_ends[a:b].tolist()
        starts = [int(self.value_ends[a - 1]) if a else 0, *ends[:-1]][: len(ends)]
        ids = self.value_field[a:b].tolist()
        return [(self.fields[f], s, e) for f, s, e in zip(ids, starts, ends, strict=True)]

    def take(self, order: Sequence[int] | np.ndarray) -> DocumentTable:
        """The documents at positions ``order``, in that order."""
        builder = DocumentTableBuilder()
        builder.extend(self, order)
        return builder.build()

    def join(self, parts: Sequence[DocumentTable]) -> DocumentTable:
        """These documents followed by each of ``parts``'."""
        builder = DocumentTableBuilder()
        for table in (self, *parts):
            builder.extend(table)
        return builder.build()

    def to_bytes(self) -> bytes:
        """Serialise in the documented layout, trailer included."""
        field_blob, field_ends = _names_blob(self.fields)
        source_blob, source_ends = _names_blob(self.sources)
        header = _HEADER.pack(
            MAGIC,
            VERSION,
            len(self.fields),
            len(self.sources),
            0,
            len(self),
            len(self.value_field),
            len(self.key_blob),
            len(self.blob),
            len(field_blob),
            len(source_blob),
        )
        parts = [header]
        for arr, dtype in (
            (self.source, "<u4"),
            (self.row, "<i8"),
            (self.key_ends, "<u8"),
            (self.value_ranges, "<u8"),
            (self.value_field, "<u4"),
            (self.value_ends, "<u8"),
            (field_ends, "<u8"),
            (source_ends, "<u8"),
        ):
            data = np.ascontiguousarray(arr, dtype=dtype).tobytes()
            parts += [data, bytes(_pad8(len(data)))]
        for blob in (self.key_blob, self.blob, field_blob, source_blob):
            parts += [blob, bytes(_pad8(len(blob)))]
        body = b"".join(parts)
        return body + _TRAILER.pack(crc32c.crc32c(body), 0)

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, name: str) -> DocumentTable:
        """Parse and validate ``NAME.docs``; ``name`` (its path) appears in every error."""
        sections = _sections(memoryview(data).cast("B"), name)
        u8 = lambda b: np.frombuffer(b, dtype="<u8")  # noqa: E731
        table = cls(
            source=np.frombuffer(sections[0], dtype="<u4"),
            row=np.frombuffer(sections[1], dtype="<i8"),
            key_ends=u8(sections[2]),
            value_ranges=u8(sections[3]),
            value_field=np.frombuffer(sections[4], dtype="<u4"),
            value_ends=u8(sections[5]),
            key_blob=bytes(sections[8]),
            blob=bytes(sections[9]),
            fields=_split(bytes(sections[10]), u8(sections[6])),
            sources=_split(bytes(sections[11]), u8(sections[7])),
        )
        table._check_consistent(name)
        return table

    def _check_consistent(self, name: str) -> None:
        """Refuse a table whose numbers cannot describe its own blobs (crc-valid garbage
        included)."""

        def bad(what: str) -> ShardCorruptError:
            return ShardCorruptError(name, f"inconsistent documents table: {what}")

        for what, ends, size in (
            ("key table", self.key_ends, len(self.key_blob)),
            ("value ends", self.value_ends, len(self.blob)),
        ):
            if len(ends) and (np.any(np.diff(ends.astype(np.int64)) < 0) or ends[-1] != size):
                raise bad(what)
        ranges = self.value_ranges
        if ranges[0] != 0 or ranges[-1] != len(self.value_field) or np.any(np.diff(ranges) < 0):
            raise bad("value ranges")
        if np.any(self.value_field >= len(self.fields)):
            raise bad("unknown field ids")
        known = (self.source < len(self.sources)) | (self.source == NO_SOURCE)
        if not known.all():
            raise bad("unknown source ids")


def _sections(data: memoryview, name: str) -> list[memoryview]:
    """The table's sections, once its size, magic, version and checksum are checked."""
    if len(data) < _HEADER.size + _TRAILER.size:
        raise ShardCorruptError(
            name,
            f"documents table is {len(data)} bytes, shorter than its header; the file was "
            "cut short: write the shard again",
        )
    magic, version, f, s, _flags, n, m, keys, values, field_bytes, source_bytes = (
        _HEADER.unpack_from(data)
    )
    if magic != MAGIC:
        raise ShardCorruptError(name, "not a datapipe documents table (bad magic)")
    if version != VERSION:
        raise FormatVersionError(
            f"{name}: documents table version {version} is not supported (this datapipe reads "
            f"version {VERSION}); upgrade datapipe"
        )
    sizes = [4 * n, 8 * n, 8 * n, 8 * (n + 1), 4 * m, 8 * m, 8 * f, 8 * s]
    sizes += [keys, values, field_bytes, source_bytes]
    expected = _HEADER.size + sum(x + _pad8(x) for x in sizes) + _TRAILER.size
    if expected != len(data):
        raise ShardCorruptError(
            name,
            f"documents table is {len(data)} bytes but its header implies {expected}; "
            "write the shard again",
        )
    body_end = len(data) - _TRAILER.size
    crc, zero = _TRAILER.unpack_from(data, body_end)
    if crc32c.crc32c(data[:body_end]) != crc or zero != 0:
        raise ShardCorruptError(name, "documents table checksum mismatch; write the shard again")
    sections, pos = [], _HEADER.size
    for x in sizes:
        sections.append(data[pos : pos + x])
        pos += x + _pad8(x)
    return sections


class DocumentTableBuilder:
    """Collects documents as a writer meets them, then freezes them into a DocumentTable."""

    def __init__(self) -> None:
        self._keys = bytearray()
        self._key_ends = array("Q")
        self._source = array("I")
        self._row = array("q")
        self._ranges = array("Q", [0])
        self._field = array("I")
        self._ends = array("Q")
        self._blob = bytearray()
        self._field_ids: dict[str, int] = {}
        self._source_ids: dict[str, int] = {}

    def add(
        self, key: str, source: str | None, row: int | None, values: Mapping[str, memoryview]
    ) -> None:
        """Record one document: its key, origin and other fields' bytes (in ``values`` order)."""
        self._keys += key.encode("utf-8", "surrogateescape")
        self._key_ends.append(len(self._keys))
        ids = self._source_ids
        self._source.append(NO_SOURCE if source is None else ids.setdefault(source, len(ids)))
        self._row.append(-1 if row is None else row)
        for name, value in values.items():
            self._field.append(self._field_ids.setdefault(name, len(self._field_ids)))
            self._blob += value
            self._ends.append(len(self._blob))
        self._ranges.append(len(self._field))

    def extend(self, table: DocumentTable, order: Sequence[int] | np.ndarray | None = None) -> None:
        """Record documents of ``table`` (those at ``order``, or all), as ``add`` would."""
        blob = memoryview(table.blob)
        for i in range(len(table)) if order is None else np.asarray(order).tolist():
            values = {name: blob[start:end] for name, start, end in table.values(i)}
            self.add(table.key(i), *table.origin(i), values)

    def build(self) -> DocumentTable:
        """The finished table."""
        arr = array_view
        return DocumentTable(
            key_ends=arr(self._key_ends, np.uint64),
            key_blob=bytes(self._keys),
            source=arr(self._source, np.uint32),
            row=arr(self._row, np.int64),
            value_ranges=arr(self._ranges, np.uint64),
            value_field=arr(self._field, np.uint32),
            value_ends=arr(self._ends, np.uint64),
            blob=bytes(self._blob),
            fields=tuple(self._field_ids),
            sources=tuple(self._source_ids),
        )
