"""Writes WebDataset tar shards: members '<key>.<field>' grouped by key, fields sorted, bytes deterministic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from datapipe.errors import SampleError
from datapipe.formats.base import ShardWriter
from datapipe.formats.tar.headers import END_OF_ARCHIVE, member_header, padding

TAR_FORMAT_CODE = 1


class TarShardWriter(ShardWriter):
    """A WebDataset tar writer. Payloads must be bytes-like; keys may not contain '.'.

    The archive ends with the two zero blocks of the tar standard and no further record padding.
    """

    format_code = TAR_FORMAT_CODE
    allow_dots_in_keys = False

    def _write_sample(self, key: str, fields: dict[str, Any], sample_sha: Any) -> list[tuple[str, int, int]]:
        members = []
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
            members.append((name, self._pos + len(header), size))
            for part in (header, payload, padding(size)):
                if part:
                    self._emit(part)
                    sample_sha.update(part)
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

    def _write_end(self) -> None:
        self._emit(END_OF_ARCHIVE)
