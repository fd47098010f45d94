"""The Megatron-Core index of a token shard (``NAME.idx``) and the token dtypes it can name."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from datapipe.errors import ConfigError, FormatVersionError, SampleError, ShardCorruptError

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
# magic, version, dtype code, sequence count, document count: 34 bytes, so the arrays after it
# are not 8-byte aligned (numpy reads them unaligned, as Megatron-Core does)
_HEADER = struct.Struct("<9sQBQQ")
HEADER_SIZE = _HEADER.size
# Megatron-Core's DType codes (megatron/core/datasets/indexed_dataset.py); it has no uint32
DTYPE_CODES = {
    np.dtype("uint8"): 1,
    np.dtype("int8"): 2,
    np.dtype("int16"): 3,
    np.dtype("int32"): 4,
    np.dtype("int64"): 5,
    np.dtype("uint16"): 8,
}
_BY_CODE = {code: dtype for dtype, code in DTYPE_CODES.items()}
UINT16_VOCAB = 1 << 16
MAX_VOCAB = 1 << 31
MAX_LENGTH = (1 << 31) - 1  # Megatron-Core's sequence lengths are int32


def token_dtype(vocab_size: int) -> np.dtype:
    """The dtype token ids of a vocabulary of ``vocab_size`` ids are stored as: uint16 up to
    65,536 ids, else int32 (Megatron-Core has no uint32 code; ids stay below 2^31)."""
    if not 0 < vocab_size <= MAX_VOCAB:
        raise ConfigError(
            f"a vocabulary of {vocab_size} ids cannot be stored as token ids (1 to {MAX_VOCAB})"
        )
    return np.dtype("<u2") if vocab_size <= UINT16_VOCAB else np.dtype("<i4")


def dtype_code(dtype: np.dtype) -> int:
    """Megatron-Core's code of ``dtype``; ConfigError for a dtype it has no code for."""
    code = DTYPE_CODES.get(np.dtype(dtype).newbyteorder("="))
    if code is None:
        raise ConfigError(f"Megatron-Core has no dtype code for {np.dtype(dtype)} token ids")
    return code


@dataclass(frozen=True, eq=False)
class MegatronIndex:
    """One sequence per document: its token count (int32), byte offset in ``NAME.bin`` (int64),
    and the document boundaries over sequences (int64, ``document_indices[-1]`` = count)."""

    dtype: np.dtype
    lengths: np.ndarray
    pointers: np.ndarray
    document_indices: np.ndarray

    def __len__(self) -> int:
        return len(self.lengths)

    @classmethod
    def for_lengths(cls, lengths: np.ndarray, dtype: np.dtype) -> MegatronIndex:
        """The index of documents of ``lengths`` tokens stored back to back from byte 0."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if len(lengths) and (lengths.min() < 0 or lengths.max() > MAX_LENGTH):
            raise SampleError(
                f"a document of {int(lengths.max())} tokens is longer than Megatron-Core's int32 "
                f"sequence lengths hold ({MAX_LENGTH}); split it before writing"
            )
        ends = np.cumsum(lengths * np.dtype(dtype).itemsize)
        return cls(
            dtype=np.dtype(dtype),
            lengths=lengths.astype("<i4"),
            pointers=(ends - lengths * np.dtype(dtype).itemsize).astype("<i8"),
            document_indices=np.arange(len(lengths) + 1, dtype="<i8"),
        )

    def bin_size(self) -> int:
        """Bytes of ``NAME.bin`` the index reaches: the end of its last sequence."""
        if not len(self):
            return 0
        return int(self.pointers[-1]) + int(self.lengths[-1]) * self.dtype.itemsize

    def to_bytes(self) -> bytes:
        """The ``NAME.idx`` bytes, exactly as ``IndexedDataset(prefix)`` reads them."""
        header = _HEADER.pack(
            MAGIC, VERSION, dtype_code(self.dtype), len(self), len(self.document_indices)
        )
        return b"".join(
            [
                header,
                np.ascontiguousarray(self.lengths, "<i4").tobytes(),
                np.ascontiguousarray(self.pointers, "<i8").tobytes(),
                np.ascontiguousarray(self.document_indices, "<i8").tobytes(),
            ]
        )

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, name: str) -> MegatronIndex:
        """Parse ``NAME.idx`` (ours or Megatron-Core's ``preprocess_data.py``'s); every error names
        ``name`` and says what to do."""
        data = memoryview(data).cast("B")
        if len(data) < HEADER_SIZE:
            raise ShardCorruptError(
                name,
                f"Megatron index is {len(data)} bytes, shorter than its {HEADER_SIZE}-byte "
                "header; the file was cut short: write the shard again",
            )
        magic, version, code, sequences, documents = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise ShardCorruptError(name, "not a Megatron-Core index (no MMIDIDX header)")
        if version != VERSION:
            raise FormatVersionError(
                f"{name}: Megatron index version {version} is not supported (this datapipe reads "
                f"version {VERSION})"
            )
        if code not in _BY_CODE:
            raise ShardCorruptError(name, f"dtype code {code} is not an integer token dtype")
        expected = HEADER_SIZE + 12 * sequences + 8 * documents
        if len(data) != expected:
            raise ShardCorruptError(
                name,
                f"Megatron index is {len(data)} bytes but its header implies {expected} "
                "(a cut or multimodal file); write the shard again",
            )
        at = HEADER_SIZE
        lengths = np.frombuffer(data, "<i4", sequences, at)
        pointers = np.frombuffer(data, "<i8", sequences, at + 4 * sequences)
        indices = np.frombuffer(data, "<i8", documents, at + 12 * sequences)
        index = cls(_BY_CODE[code], lengths, pointers, indices)
        index._check_consistent(name)
        return index

    def _check_consistent(self, name: str) -> None:
        """Refuse numbers that cannot describe a ``.bin`` of whole sequences."""
        indices = self.document_indices
        if (
            not len(indices)
            or indices[0] != 0
            or indices[-1] != len(self)
            or np.any(np.diff(indices) < 0)
        ):
            raise ShardCorruptError(name, "inconsistent Megatron index: document indices")
        if len(self) and (
            np.any(self.lengths < 0)
            or np.any(self.pointers < 0)
            or np.any(self.pointers % self.dtype.itemsize)
        ):
            raise ShardCorruptError(name, "inconsistent Megatron index: sequence spans")

    def check_bin_size(self, size: int, name: str) -> None:
        """Fail when ``NAME.bin`` (``size`` bytes) does not hold every sequence the index names."""
        ends = self.pointers + self.lengths.astype(np.int64) * self.dtype.itemsize
        if len(self) and int(ends.max()) > size:
            raise ShardCorruptError(
                name,
                f"the index reaches byte {int(ends.max())} but the .bin holds {size}; the "
                ".bin was cut short or belongs to another index: write the shard again",
            )
