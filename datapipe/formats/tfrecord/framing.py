"""TFRecord framing: u64 length, masked CRC32C of the length, payload, masked CRC32C of the
payload."""

from __future__ import annotations

import struct

import crc32c

LENGTH = struct.Struct("<Q")
CRC = struct.Struct("<I")
HEADER_SIZE = LENGTH.size + CRC.size  # 12
FOOTER_SIZE = CRC.size  # 4
_MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes | memoryview) -> int:
    """TensorFlow's masked CRC32C: rotate right by 15 bits and add a constant."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(payload: bytes) -> bytes:
    """One complete record around ``payload``, exactly as TensorFlow's TFRecordWriter writes it."""
    length = LENGTH.pack(len(payload))
    return length + CRC.pack(masked_crc(length)) + payload + CRC.pack(masked_crc(payload))
