"""Writes token shards: ``NAME.bin`` of token ids, its Megatron-Core index and documents table."""

from __future__ import annotations

import io
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

import numpy as np

from datapipe.errors import SampleError
from datapipe.formats.base import KEY, ShardWriter, WrittenShard
from datapipe.formats.encoded import EncodedSamples
from datapipe.formats.tokens.docs import DocumentTable, DocumentTableBuilder
from datapipe.formats.tokens.megatron import MAX_LENGTH, MegatronIndex

TOKENS_FORMAT_CODE = 3
TOKENS = "tokens"
# where a sample gives its document's origin; kept in the documents table, not as fields
SOURCE = "__source__"
ROW = "__row__"
MEGATRON_INDEX = ".idx"
DOCUMENTS = ".docs"
COMPANIONS = (MEGATRON_INDEX, DOCUMENTS)
BIN = ".bin"


def companion_name(shard: str, suffix: str) -> str:
    """The name of companion ``suffix`` of the shard called ``shard`` (``NAME.bin`` ->
    ``NAME.idx``)."""
    return (shard[: -len(BIN)] if shard.endswith(BIN) else shard) + suffix


def stored_dtype(dtype: np.dtype) -> np.dtype:
    """How token ids given as ``dtype`` are stored: uint16 from uint8 and uint16, else int32."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "iu":
        raise SampleError(f"token ids must be integers, not {dtype}")
    return np.dtype("<u2") if dtype.kind == "u" and dtype.itemsize <= 2 else np.dtype("<i4")


@dataclass(frozen=True, eq=False)
class TokenRows:
    """What an encoded block of documents carries beside their ids (``EncodedSamples.rows``):
    the ids' dtype (None for no documents) and the documents' table."""

    dtype: np.dtype | None
    documents: DocumentTable

    def __len__(self) -> int:
        return len(self.documents)

    def take(self, order: np.ndarray) -> TokenRows:
        """The rows of documents ``order``, in that order."""
        return TokenRows(self.dtype, self.documents.take(order))

    def join(self, parts: Sequence[TokenRows]) -> TokenRows:
        """These rows followed by ``parts``' (documents of one dtype)."""
        dtypes = {p.dtype for p in (self, *parts) if p.dtype is not None and len(p)}
        if len(dtypes) > 1:
            raise SampleError(f"blocks of {sorted(d.name for d in dtypes)} ids in one shard")
        dtype = dtypes.pop() if dtypes else self.dtype
        return TokenRows(dtype, self.documents.join([p.documents for p in parts]))


class TokensShardWriter(ShardWriter):
    """Writes documents of token ids back to back into ``NAME.bin``.

    Each sample holds ``tokens`` (a 1-D numpy array of integer ids) and other fields as bytes,
    and may give its origin as ``__source__`` (str) and ``__row__`` (int). The ids are stored as
    ``dtype`` (uint16 or int32: ``token_dtype`` of the vocabulary size) or, without one, as the
    first document's ids map by ``stored_dtype``; an id that does not fit is a SampleError.
    ``finish`` returns the Megatron index and the documents table as companions.
    """

    format_code = TOKENS_FORMAT_CODE
    allow_dots_in_keys = True
    required_fields = (TOKENS,)

    def __init__(self, out: BinaryIO, name: str = "<stream>", *, dtype: Any = None) -> None:
        super().__init__(out, name)
        self.dtype = None if dtype is None else stored_dtype(dtype)
        if dtype is not None and self.dtype != np.dtype(dtype).newbyteorder("<"):
            raise SampleError(f"{name}: token shards store uint16 or int32 ids, not {dtype}")
        self._lengths = array("q")
        self._documents = DocumentTableBuilder()
        self._origin: tuple[str | None, int | None] = (None, None)

    def write(self, sample: Mapping[str, Any]) -> None:
        """Append one document; its ``__source__`` and ``__row__`` go to the documents table."""
        source, row = sample.get(SOURCE), sample.get(ROW)
        if not (source is None or isinstance(source, str)) or not (
            row is None or (isinstance(row, int | np.integer) and row >= 0)
        ):
            raise SampleError(
                f"{self.name}: document {sample.get('__key__')!r}: __source__ must be a str and "
                f"__row__ an int >= 0, got {source!r} and {row!r}"
            )
        self._origin = (source, None if row is None else int(row))
        super().write({k: v for k, v in sample.items() if k not in (SOURCE, ROW)})

    def _ids(self, key: str, value: Any) -> np.ndarray:
        """The document's ids as the shard stores them, checked."""
        if not (isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "iu"):
            raise SampleError(
                f"{self.name}: document {key!r}: {TOKENS!r} must be a 1-D numpy array of integer "
                f"token ids, got {type(value).__name__}"
            )
        if len(value) > MAX_LENGTH:
            raise SampleError(
                f"{self.name}: document {key!r} has {len(value)} tokens, more than Megatron-Core's "
                f"int32 sequence lengths hold ({MAX_LENGTH}); split it into several documents"
            )
        if self.dtype is None:
            self.dtype = stored_dtype(value.dtype)
        dtype = self.dtype
        if value.dtype != dtype and len(value):
            low, high = int(value.min()), int(value.max())
            if low < 0 or high > np.iinfo(dtype).max:
                bad = low if low < 0 else high
                raise SampleError(
                    f"{self.name}: document {key!r}: token id {bad} does not fit this shard's "
                    f"{dtype.name} ids; write ids of a larger vocabulary as int32"
                )
        return np.ascontiguousarray(value, dtype=dtype)

    def _write_sample(
        self, key: str, fields: dict[str, Any], sample_sha: Any
    ) -> list[tuple[str, int, int]]:
        if TOKENS not in fields:
            raise SampleError(f"{self.name}: document {key!r} has no {TOKENS!r} field")
        ids = self._ids(key, fields[TOKENS])
        values = {}
        for name, value in fields.items():
            if name == TOKENS:
                continue
            try:
                values[name] = memoryview(value).cast("B")
            except TypeError:
                raise SampleError(
                    f"{self.name}: document {key!r}, field {name!r}: token shards keep other "
                    f"fields as bytes, got {type(value).__name__}; encode the value first"
                ) from None
        data = memoryview(ids).cast("B")
        start = self._pos
        self._emit(data)
        sample_sha.update(data)
        self._lengths.append(len(ids))
        self._documents.add(key, *self._origin, values)
        return [(TOKENS, start, len(data))]

    @classmethod
    def sample_size(cls, key: str, fields: Mapping[str, Any]) -> int:
        """Bytes of the document's ids in ``NAME.bin``, stored as ``stored_dtype`` of their
        dtype (the tokenize stage gives every document the shard's dtype)."""
        ids = fields[TOKENS]
        return len(ids) * stored_dtype(ids.dtype).itemsize

    @classmethod
    def encode_samples(
        cls, keys: Sequence[str], fields: Mapping[str, Sequence[Any]]
    ) -> EncodedSamples:
        """Documents given column-wise (``__source__`` and ``__row__`` columns included), encoded
        as ``write`` would write them, their documents table in the block's ``rows``."""
        out = io.BytesIO()
        writer = cls(out)
        names = sorted(fields)
        for key, *values in zip(keys, *(fields[n] for n in names), strict=True):
            writer.write({KEY: key, **dict(zip(names, values, strict=True))})
        block = EncodedSamples.from_index(out.getvalue(), writer._index.build(writer._pos))
        return replace(block, rows=TokenRows(writer.dtype, writer._documents.build()))

    def write_encoded(self, block: EncodedSamples) -> None:
        """Append documents that ``encode_samples`` encoded: their ids, index rows and documents
        table rows."""
        rows = block.rows
        if not isinstance(rows, TokenRows):
            raise SampleError(
                f"{self.name}: an encoded block without its documents table; encode token "
                "documents with TokensShardWriter.encode_samples"
            )
        if len(block) and rows.dtype is not None:
            if self.dtype is None:
                self.dtype = rows.dtype
            elif rows.dtype != self.dtype:
                raise SampleError(
                    f"{self.name}: a block of {rows.dtype.name} ids in a shard of "
                    f"{self.dtype.name} ids; give every document the shard's dtype (token_dtype)"
                )
        super().write_encoded(block)
        if len(block):
            sizes = np.diff(np.asarray(block.bounds, dtype=np.int64)) // self.dtype.itemsize
            self._lengths.frombytes(sizes.astype(np.int64).tobytes())
        self._documents.extend(rows.documents)

    def finish(self) -> WrittenShard:
        """Close ``NAME.bin``; the Megatron index and documents table come as companions."""
        if self._finished is None:
            lengths = np.frombuffer(self._lengths, np.int64) if self._lengths else np.zeros(0)
            if not lengths.sum():
                raise SampleError(
                    f"{self.name}: a token shard needs at least one token (Megatron-Core cannot "
                    "map an empty .bin); leave out documents without tokens (min_tokens)"
                )
            assert self.dtype is not None
            written = super().finish()
            megatron = MegatronIndex.for_lengths(lengths, self.dtype)
            companions = {
                MEGATRON_INDEX: megatron.to_bytes(),
                DOCUMENTS: self._documents.build().to_bytes(),
            }
            self._finished = replace(written, companions=companions, tokens=int(lengths.sum()))
        return self._finished
