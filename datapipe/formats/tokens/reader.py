"""Reads token shards: documents' ids as numpy views of ``NAME.bin``, keys and other fields."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from datapipe.errors import NotFoundError, ShardCorruptError
from datapipe.formats.base import KEY, Sample, ScanEntry, ShardReader
from datapipe.formats.index import ShardIndex
from datapipe.formats.tokens.docs import DocumentTable
from datapipe.formats.tokens.megatron import MegatronIndex
from datapipe.formats.tokens.writer import (
    COMPANIONS,
    DOCUMENTS,
    MEGATRON_INDEX,
    TOKENS,
    TOKENS_FORMAT_CODE,
    companion_name,
)
from datapipe.storage.local import Buffer, populate_pages


class TokensShardReader(ShardReader):
    """A token shard: ``len``, ``tokens(i)`` (a numpy view of the mapped ``.bin``, no copy),
    ``reader[i]`` (key, tokens and other fields), ``lengths`` and ``origin(i)``.

    It reads through the Megatron index and the documents table (its companions), so random
    access works without datapipe's ``NAME.bin.idx``; with it, the three are checked to agree.
    """

    format_code = TOKENS_FORMAT_CODE

    def __init__(
        self,
        buffer: Buffer,
        name: str,
        index: ShardIndex | None = None,
        *,
        copy: bool = False,
        verify_crc: bool = True,
        companions: Mapping[str, Buffer] | None = None,
    ) -> None:
        companions = companions or {}
        missing = [companion_name(name, s) for s in COMPANIONS if s not in companions]
        if missing:
            raise NotFoundError(
                f"{name}: a token shard is read with its {' and '.join(missing)}; copy them "
                "beside it"
            )
        self.megatron = MegatronIndex.from_bytes(
            companions[MEGATRON_INDEX], companion_name(name, MEGATRON_INDEX)
        )
        self.documents = DocumentTable.from_bytes(
            companions[DOCUMENTS], companion_name(name, DOCUMENTS)
        )
        self.dtype = self.megatron.dtype.newbyteorder("<")
        self.megatron.check_bin_size(len(memoryview(buffer)), name)
        if len(self.documents) != len(self.megatron):
            raise ShardCorruptError(
                companion_name(name, DOCUMENTS),
                f"{len(self.documents)} documents, but the Megatron index has "
                f"{len(self.megatron)}; the files belong to different shards",
            )
        super().__init__(
            buffer, name, index, copy=copy, verify_crc=verify_crc, companions=companions
        )

    def _check_index(self, index: ShardIndex) -> None:
        """Besides the base checks: datapipe's spans are the Megatron index's."""
        super()._check_index(index)
        megatron = self.megatron
        sizes = megatron.lengths.astype(np.int64) * self.dtype.itemsize
        if (
            len(index) != len(megatron)
            or not np.array_equal(index.sample_start, megatron.pointers)
            or not np.array_equal(index.sample_end - index.sample_start, sizes)
        ):
            raise ShardCorruptError(
                self.name,
                "its index and its Megatron index describe different documents; rebuild the "
                "index with `datapipe index`",
            )

    def __len__(self) -> int:
        return len(self.megatron)

    def __getitem__(self, i: int) -> Sample:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self.name}: document {i} out of range for {n} documents")
        return self._read(i % n)

    @property
    def lengths(self) -> np.ndarray:
        """Every document's token count (int64), in shard order."""
        return self.megatron.lengths.astype(np.int64)

    def tokens(self, i: int) -> np.ndarray:
        """Document ``i``'s token ids: a read-only view of the mapped ``.bin`` (a copy with
        ``copy=True``)."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self.name}: document {i} out of range for {n} documents")
        i %= n
        count, offset = int(self.megatron.lengths[i]), int(self.megatron.pointers[i])
        ids = np.frombuffer(self._buffer, dtype=self.dtype, count=count, offset=offset)
        return ids.copy() if self.copy else ids

    def ids(self) -> np.ndarray:
        """Every token id of the shard, documents back to back: a read-only view of the mapped
        ``.bin`` (what packed rows are gathered from)."""
        count = self.megatron.bin_size() // self.dtype.itemsize
        return np.frombuffer(self._buffer, dtype=self.dtype, count=count)

    def populate_pages(self) -> None:
        """Map every page of the ids now (packed rows are read all over a window's shards)."""
        populate_pages(self._buffer)

    def offsets(self) -> np.ndarray:
        """Where each document's ids start in ``ids()`` (int64 element offsets)."""
        return self.megatron.pointers.astype(np.int64) // self.dtype.itemsize

    def origin(self, i: int) -> tuple[str | None, int | None]:
        """The source file and row document ``i`` came from (None where not recorded)."""
        return self.documents.origin(i)

    def keys(self) -> list[str]:
        """Every key, in shard order."""
        return [self.documents.key(i) for i in range(len(self))]

    def key_array(self) -> np.ndarray:
        """Every key, from the index or else the documents table (batch key lookups work
        without ``NAME.bin.idx``)."""
        if self._key_array is None and self.index is None:
            self._key_array = np.array(self.keys(), dtype=object)
        return super().key_array()

    def _read(self, i: int) -> Sample:
        blob = memoryview(self.documents.blob)
        sample: Sample = {KEY: self.documents.key(i), TOKENS: self.tokens(i)}
        for name, start, end in self.documents.values(i):
            sample[name] = bytes(blob[start:end]) if self.copy else blob[start:end]
        return {KEY: sample.pop(KEY), **dict(sorted(sample.items()))}

    def scan(self) -> Iterator[ScanEntry]:
        """Every document in order, located through the Megatron index (``.bin`` holds ids
        only)."""
        for i in range(len(self)):
            sample = self._read(i)
            start = int(self.megatron.pointers[i])
            end = start + sample[TOKENS].nbytes
            yield ScanEntry(sample[KEY], start, end, sample, [(TOKENS, start, end - start)])
