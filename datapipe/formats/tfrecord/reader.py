"""Reads TFRecord shards by index or by scanning records, checking CRCs (switchable) as it goes.

The length's CRC is always checked: it is 8 bytes and guards every later bounds decision. The
payload CRC is checked unless ``verify_crc=False``. Records without a '__key__' feature (files
from other writers) get their record number, zero-padded to 8 digits, as key.
"""

from __future__ import annotations

from collections.abc import Iterator

from datapipe.errors import ShardCorruptError
from datapipe.formats.base import KEY, Sample, ScanEntry, ShardReader
from datapipe.formats.tfrecord.example import DecodeError, decode_example
from datapipe.formats.tfrecord.framing import CRC, FOOTER_SIZE, HEADER_SIZE, LENGTH, masked_crc
from datapipe.formats.tfrecord.writer import TFRECORD_FORMAT_CODE


class TFRecordShardReader(ShardReader):
    """Reader for TFRecord shards of tf.train.Example records."""

    format_code = TFRECORD_FORMAT_CODE

    def _record(self, pos: int, number: int) -> tuple[memoryview, int]:
        """Payload view of the record at ``pos`` and the offset just past it, bounds and CRCs
        checked."""
        view = self._view
        left = len(view) - pos
        if left < HEADER_SIZE:
            raise ShardCorruptError(
                self.name, f"record {number}: header cut short ({left} bytes left)", pos
            )
        (length,) = LENGTH.unpack_from(view, pos)
        (length_crc,) = CRC.unpack_from(view, pos + LENGTH.size)
        if masked_crc(view[pos : pos + LENGTH.size]) != length_crc:
            raise ShardCorruptError(self.name, f"record {number}: length checksum mismatch", pos)
        if length > left - HEADER_SIZE - FOOTER_SIZE:
            raise ShardCorruptError(
                self.name,
                f"record {number} claims {length} bytes but only {left - HEADER_SIZE} remain",
                pos,
            )
        start = pos + HEADER_SIZE
        payload = view[start : start + length]
        if self.verify_crc:
            (data_crc,) = CRC.unpack_from(view, start + length)
            if masked_crc(payload) != data_crc:
                raise ShardCorruptError(self.name, f"record {number}: data checksum mismatch", pos)
        return payload, start + length + FOOTER_SIZE

    def _decode(self, payload: memoryview, number: int, pos: int) -> tuple[str, Sample]:
        try:
            key, fields = decode_example(payload)
        except DecodeError:
            raise ShardCorruptError(
                self.name, f"record {number} is not a tf.train.Example", pos
            ) from None
        key = key if key is not None else f"{number:08d}"
        return key, {KEY: key, **fields}

    def _read(self, i: int) -> Sample:
        index = self.index
        assert index is not None
        pos = int(index.sample_start[i])
        payload, _ = self._record(pos, i)
        return self._decode(payload, i, pos)[1]

    def scan(self) -> Iterator[ScanEntry]:
        """Walk the records from the start of the file."""
        pos, number, end = 0, 0, len(self._view)
        while pos < end:
            payload, next_pos = self._record(pos, number)
            key, sample = self._decode(payload, number, pos)
            yield ScanEntry(key, pos, next_pos, sample)
            pos, number = next_pos, number + 1
