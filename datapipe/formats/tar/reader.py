"""Reads WebDataset tar shards: by index in O(1), or by scanning headers (foreign tars included).

Scanning follows WebDataset's grouping rule: a member's key is its path up to the first '.'
of the basename, the rest is the field; consecutive members with the same key form a sample.
It never extracts anything. Skipped with a logged warning: links, devices, fifos and other
non-regular members, absolute names and names with a '..' component. Skipped silently:
directories, names without an extension, and WebDataset metadata names ('__*__').
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from datapipe.errors import SampleError, ShardCorruptError
from datapipe.formats.base import KEY, Sample, ScanEntry, SpanReader
from datapipe.formats.tar.headers import (
    BLOCK,
    DIRECTORY,
    GNU_LONG_LINK,
    GNU_LONG_NAME,
    PAX,
    PAX_GLOBAL,
    REGULAR,
    ZERO_BLOCK,
    HeaderError,
    parse_header,
    parse_pax,
)
from datapipe.formats.tar.writer import TAR_FORMAT_CODE

log = logging.getLogger(__name__)

_KEY_AND_FIELD = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # exactly webdataset's base_plus_ext
_META = re.compile(r"__[^/]*__($|/)")


def split_name(name: str) -> tuple[str, str] | None:
    """(key, field) of a member name under WebDataset's rule, or None when it has no extension."""
    match = _KEY_AND_FIELD.match(name)
    return (match.group(1), match.group(2)) if match else None


def unsafe_name(name: str) -> bool:
    """Absolute names and '..' components: harmless to us (we never extract), suspicious in a
    dataset."""
    return name.startswith("/") or ".." in name.split("/")


class TarShardReader(SpanReader):
    """Reader for tar shards; see the module docstring for what a scan skips."""

    format_code = TAR_FORMAT_CODE

    def _member_table(self) -> np.ndarray | tuple[int, np.ndarray]:
        """Where each sample's members are, built once per reader: (members per sample, member
        position of each field or -1) when every sample has the same fields in the same order (the
        usual case: no table), else a (samples x fields) table of member numbers, -1 where a sample
        lacks the field."""
        table = getattr(self, "_table", None)
        if table is None:
            index = self._require_index()
            n, fields = len(index), max(len(index.fields), 1)
            counts = np.diff(index.sample_members.astype(np.int64))
            per = int(counts[0]) if n else 0
            member_field = index.member_field.astype(np.int64)
            if n and (counts == per).all() and len(member_field) == n * per:
                first = member_field[:per]
                if (
                    len(set(first.tolist())) == per
                    and (member_field.reshape(n, per) == first).all()
                ):
                    position = np.full(fields, -1, dtype=np.int64)
                    position[first] = np.arange(per)
                    self._table = table = (per, position)
                    return table
            owner = np.repeat(np.arange(n), counts)
            table = np.full((n, fields), -1, dtype=np.int64)
            table[owner, member_field] = np.arange(len(owner))
            self._table = table
        return table

    def spans(self, indices: Sequence[int], field: str) -> tuple[np.ndarray, np.ndarray]:
        """Payload (offsets, sizes) of ``field`` for samples ``indices``: array lookups in the
        index."""
        index = self._require_index()
        table = self._member_table()
        rows = np.asarray(indices, dtype=np.int64)
        fid = index.fields.index(field) if field in index.fields else -1
        if isinstance(table, tuple):  # every sample has the field, or none has
            per, position = table
            members = (
                rows * per + position[fid]
                if fid >= 0 and position[fid] >= 0
                else np.full(len(rows), -1)
            )
            absent = len(rows) and members[0] < 0
        else:
            members = table[rows, fid] if fid >= 0 else np.full(len(rows), -1)
            absent = (members < 0).any()
        if absent:
            missing = index.key(int(rows[int(np.argmax(members < 0))]))
            raise SampleError(f"{self.name}: sample {missing!r} has no field {field!r}")
        return index.member_offset[members].astype(np.int64), index.member_size[members].astype(
            np.int64
        )

    def gather(
        self, indices: Sequence[int], fields: Sequence[str]
    ) -> tuple[list[str], dict[str, list[Any]]]:
        """Array lookups in the index: one slice of the mapped shard per payload, no dict per
        sample."""
        columns: dict[str, list[Any]] = {}
        view = self._view
        for name in fields:
            offsets, sizes = self.spans(indices, name)
            column = [
                view[a:b] for a, b in zip(offsets.tolist(), (offsets + sizes).tolist(), strict=True)
            ]
            columns[name] = [bytes(v) for v in column] if self.copy else column
        return self.gather_keys(indices), columns

    def _read(self, i: int) -> Sample:
        index = self.index
        assert index is not None
        a, b = int(index.sample_members[i]), int(index.sample_members[i + 1])
        sample: Sample = {KEY: index.key(i)}
        fields = index.fields
        for offset, size, fid in zip(
            index.member_offset[a:b].tolist(),
            index.member_size[a:b].tolist(),
            index.member_field[a:b].tolist(),
            strict=True,
        ):
            sample[fields[fid]] = self._payload(offset, size)
        return sample

    def _members(self) -> Iterator[tuple[int, str, int, int]]:
        """(header offset, name, payload offset, size) of each regular member worth keeping."""
        view, end = self._view, len(self._view)
        pos = 0
        long_name: str | None = None
        pax: dict[str, str] = {}
        first_header = 0  # where the current member's extended headers began
        while True:
            if pos + BLOCK > end:
                what = "no end-of-archive marker" if pos == end else "a header cut short"
                raise ShardCorruptError(self.name, f"truncated tar: {what}", pos)
            block = bytes(view[pos : pos + BLOCK])
            if block == ZERO_BLOCK:
                return  # end of archive (a lone zero block at EOF is accepted, as GNU tar does)
            try:
                header = parse_header(block)
                size = int(pax["size"]) if "size" in pax else header.size
            except (HeaderError, ValueError) as e:
                raise ShardCorruptError(self.name, f"bad tar header: {e}", pos) from None
            data = pos + BLOCK
            if size > end - data:
                raise ShardCorruptError(
                    self.name,
                    f"member claims {size} bytes but only {end - data} remain in the file",
                    pos,
                )
            next_pos = data + size + (-size % BLOCK)
            kind = header.typeflag
            if not (long_name or pax):
                first_header = pos
            if kind in (PAX, GNU_LONG_NAME):
                payload = bytes(view[data : data + size])
                try:
                    if kind == PAX:
                        pax.update(parse_pax(payload))
                    else:
                        long_name = payload.rstrip(b"\x00").decode("utf-8", "surrogateescape")
                except HeaderError as e:
                    raise ShardCorruptError(self.name, f"bad extended header: {e}", pos) from None
                pos = next_pos
                continue
            name = pax.get("path") or long_name or header.name.decode("utf-8", "surrogateescape")
            pax, long_name = {}, None
            if self._kept(kind, name, pos):
                yield first_header, name, data, size
            pos = next_pos

    def _kept(self, kind: bytes, name: str, pos: int) -> bool:
        """Whether a member is a regular file with a safe name; others are skipped, with a
        warning unless a tar writer adds them routinely (directories, global headers)."""
        if kind in REGULAR:
            if not unsafe_name(name):
                return True
            log.warning(
                "%s: skipping member %r at byte %d: absolute or '..' name", self.name, name, pos
            )
        elif kind not in (DIRECTORY, PAX_GLOBAL, GNU_LONG_LINK):
            log.warning(
                "%s: skipping non-regular member %r (type %r) at byte %d",
                self.name,
                name,
                kind,
                pos,
            )
        return False

    def scan(self) -> Iterator[ScanEntry]:
        """Group regular members into samples by WebDataset's key rule."""
        current: ScanEntry | None = None
        for header_at, name, offset, size in self._members():
            parts = split_name(name)
            if parts is None or _META.match(name):
                continue
            key, field = parts
            if current is not None and current.key != key:
                yield current
                current = None
            if current is None:
                current = ScanEntry(key, header_at, 0, {KEY: key})
            if field in current.sample:
                raise ShardCorruptError(
                    self.name, f"sample {key!r} has field {field!r} twice", header_at
                )
            current.sample[field] = self._payload(offset, size)
            current.members.append((field, offset, size))
            current.end = offset + size + (-size % BLOCK)
        if current is not None:
            yield current
