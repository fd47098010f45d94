"""Writes WebDataset tar shards: members '<key>.<field>' grouped by key, fields sorted, bytes deterministic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from datapipe.errors import SampleError
from datapipe.formats.base import ShardWriter
from datapipe.formats.tar.headers import BLOCK, END_OF_ARCHIVE, MAX_USTAR_SIZE, member_header, padding

TAR_FORMAT_CODE = 1
_PADDING = [bytes(n) for n in range(BLOCK)]


class TarShardWriter(ShardWriter):
    """A WebDataset tar writer. Payloads must be bytes-like; keys may not contain '.'.

    The archive ends with the two zero blocks of the tar standard and no further record padding.
    """

    format_code = TAR_FORMAT_CODE
    allow_dots_in_keys = False

    def _write_sample(self, key: str, fields: dict[str, Any], sample_sha: Any) -> list[tuple[str, int, int]]:
        members = []
        parts: list[Any] = []
        pos = self._pos
        for name, value in fields.items():
            try:
                payload = memoryview(value).cast("B")
            except TypeError:
                raise SampleError(
                    f"sample {key!r}, field {name!r}: the tar format stores bytes, got {type(value).__name__}; "
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
        """Vectorised: plain ustar members (ASCII names of 100 bytes or less) cost 512 + padded payload."""
        n = len(keys)
        key_len = np.fromiter((len(k) if k.isascii() else 1000 for k in keys), dtype=np.int64, count=n)
        total = np.zeros(n, dtype=np.int64)
        plain = np.ones(n, dtype=bool)
        for name, payloads in fields.items():
            size = np.fromiter((memoryview(p).nbytes for p in payloads), dtype=np.int64, count=n)
            total += BLOCK + size + (-size % BLOCK)
            plain &= (key_len + 1 + len(name.encode()) <= 100) & (size <= MAX_USTAR_SIZE) & name.isascii()
        for i in np.flatnonzero(~plain).tolist():  # long or non-ASCII names, huge payloads: pax headers
            total[i] = cls.sample_size(keys[i], {name: payloads[i] for name, payloads in fields.items()})
        return total

    def _write_end(self) -> None:
        self._emit(END_OF_ARCHIVE)
