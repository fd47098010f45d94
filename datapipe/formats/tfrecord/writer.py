"""Writes TFRecord shards: one framed tf.train.Example per sample, bytes deterministic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from datapipe.formats.base import ShardWriter
from datapipe.formats.tfrecord.example import encode_example
from datapipe.formats.tfrecord.framing import frame

TFRECORD_FORMAT_CODE = 2


class TFRecordShardWriter(ShardWriter):
    """A TFRecord writer; keys may hold any character but '/', NUL and control characters."""

    format_code = TFRECORD_FORMAT_CODE
    allow_dots_in_keys = True

    @classmethod
    def sample_size(cls, key: str, fields: Mapping[str, Any]) -> int:
        """The serialised Example plus 16 bytes of framing (length, two CRCs)."""
        return len(encode_example(key, dict(sorted(fields.items())))) + 16

    def _write_sample(
        self, key: str, fields: dict[str, Any], sample_sha: Any
    ) -> list[tuple[str, int, int]]:
        record = frame(encode_example(key, fields))
        self._emit(record)
        sample_sha.update(record)
        return []
