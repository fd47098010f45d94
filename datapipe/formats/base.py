"""What every shard format implements: a writer and a reader of one shard."""

from __future__ import annotations

import contextlib
import hashlib
import io
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, ClassVar

import numpy as np

from datapipe.errors import ConfigError, IndexRequiredError, SampleError, ShardCorruptError
from datapipe.formats.encoded import EncodedSamples
from datapipe.formats.index import IndexBuilder, ShardIndex
from datapipe.formats.keys import check_field, check_key, plain_keys
from datapipe.storage.local import Buffer, drop_pages, release

KEY = "__key__"

# A sample: {"__key__": str, field: payload, ...}. Tar payloads are bytes-like; TFRecord also
# holds int64 and float lists (see the tfrecord package).
Sample = dict[str, Any]


@dataclass(frozen=True)
class WrittenShard:
    """What a writer produced: sample count, byte size, sha256 of the file, and its index.

    ``companions``: the bytes of the files a format writes beside the shard, by suffix (the
    token format's Megatron index and documents table; ``ShardFormat.companion_path`` names them).
    ``tokens``: the token ids a token shard holds (its manifest entry records them); None for
    formats of other samples.
    """

    samples: int
    size: int
    sha256: str
    index: ShardIndex
    companions: Mapping[str, bytes] = field(default_factory=dict)
    tokens: int | None = None


class ShardWriter(ABC):
    """Writes samples to one binary stream, hashing the file and building its index on the way.

    Output is deterministic: the same samples in the same order give the same bytes.
    """

    format_code: ClassVar[int]
    allow_dots_in_keys: ClassVar[bool]
    # fields every sample must have, of the kinds the format stores (the token format's
    # ``tokens``); the shard-format conformance suite runs on formats with none
    required_fields: ClassVar[tuple[str, ...]] = ()
    # True where the format's ``encode_samples`` is faster than writing samples one by one:
    # ``write_many`` then encodes runs of samples column-wise.
    encodes_columns: ClassVar[bool] = False

    def __init__(self, out: BinaryIO, name: str = "<stream>") -> None:
        self.name = name
        self._out = out
        self._pos = 0
        self._sha = hashlib.sha256()
        self._index = IndexBuilder(self.format_code)
        self._keys: set[str] = set()
        self._finished: WrittenShard | None = None

    def _emit(self, data: bytes | memoryview) -> None:
        self._out.write(data)
        self._sha.update(data)
        self._pos += len(data)

    def write(self, sample: Mapping[str, Any]) -> None:
        """Append one sample; a key already in this shard is refused (it would merge on read)."""
        if self._finished is not None:
            raise RuntimeError(f"{self.name}: write() after finish()")
        key = check_key(sample.get(KEY), allow_dots=self.allow_dots_in_keys)
        if key in self._keys:
            raise SampleError(f"{self.name}: sample key {key!r} appears twice in one shard")
        fields = dict(sorted((check_field(k, key), v) for k, v in sample.items() if k != KEY))
        start = self._pos
        sample_sha = hashlib.sha256()
        members = self._write_sample(key, fields, sample_sha)
        self._keys.add(key)
        self._index.add(key, start, self._pos, sample_sha.digest(), members, fields)

    def write_many(
        self, samples: Iterable[Mapping[str, Any] | EncodedSamples], chunk: int = 4096
    ) -> None:
        """Append samples (and encoded blocks) in order: what ``write`` does to each, with the same
        checks, but runs of samples with the same fields are encoded column-wise by
        ``encode_samples``."""
        if not self.encodes_columns:
            for sample in samples:
                self.write_encoded(sample) if isinstance(sample, EncodedSamples) else self.write(
                    sample
                )
            return
        run: list[Mapping[str, Any]] = []
        layout: tuple[str, ...] = ()  # the field names of the run's samples, as they come
        for sample in samples:
            if isinstance(sample, EncodedSamples):
                self._write_run(run, layout)
                run = []
                self.write_encoded(sample)
                continue
            if self._finished is not None:
                raise RuntimeError(f"{self.name}: write() after finish()")
            names = tuple(sample)
            if names != layout or len(run) >= chunk:
                self._write_run(run, layout)
                run, layout = [], names
            run.append(sample)
        self._write_run(run, layout)

    def _write_run(self, run: list[Mapping[str, Any]], layout: tuple[str, ...]) -> None:
        """Check a run of samples with the same field names as ``write`` would, but once per run
        where it can (a sample's own checks only to word an error), then encode it column-wise."""
        if not run:
            return
        keys = [sample.get(KEY) for sample in run]
        if not plain_keys(keys, allow_dots=self.allow_dots_in_keys):
            for sample in run:  # raises for the first sample that write() would refuse
                check_key(sample.get(KEY), allow_dots=self.allow_dots_in_keys)
        names = sorted(check_field(k, str(keys[0])) for k in layout if k != KEY)
        fresh = set(keys)
        # a key twice: name the first one
        if len(fresh) != len(keys) or not self._keys.isdisjoint(fresh):
            seen: set[str] = set()
            for key in keys:
                if key in self._keys or key in seen:
                    raise SampleError(f"{self.name}: sample key {key!r} appears twice in one shard")
                seen.add(key)
        self._keys |= fresh
        self.write_encoded(self.encode_samples(keys, {n: [s[n] for s in run] for n in names}))

    def write_encoded(self, block: EncodedSamples) -> None:
        """Append samples that ``encode_samples`` encoded: one write, index rows appended as arrays.

        Unlike ``write``, it does not check keys against the shard's earlier ones: a build has
        quarantined duplicate keys before it writes.
        """
        if self._finished is not None:
            raise RuntimeError(f"{self.name}: write_encoded() after finish()")
        start = self._pos
        self._emit(memoryview(block.data).cast("B"))
        block.add_to_index(self._index, start)

    @classmethod
    def encode_samples(
        cls, keys: Sequence[str], fields: Mapping[str, Sequence[Any]]
    ) -> EncodedSamples:
        """Samples given column-wise, encoded exactly as ``write`` would emit them, for
        ``write_encoded``.

        This general version runs a writer into memory; a format that overrides it with faster code
        sets ``encodes_columns``.
        """
        out = io.BytesIO()
        writer = cls(out)
        names = sorted(fields)
        for key, *values in zip(keys, *(fields[n] for n in names), strict=True):
            writer.write({KEY: key, **dict(zip(names, values, strict=True))})
        return EncodedSamples.from_index(out.getvalue(), writer._index.build(writer._pos))

    @abstractmethod
    def _write_sample(
        self, key: str, fields: dict[str, Any], sample_sha: Any
    ) -> list[tuple[str, int, int]]:
        """Emit one sample (fields sorted by name), update ``sample_sha`` with every byte emitted,
        and return its (field, payload offset, payload size) members."""

    @classmethod
    @abstractmethod
    def sample_size(cls, key: str, fields: Mapping[str, Any]) -> int:
        """Bytes that ``write`` emits for this sample (fields already valid), without writing it.

        The build plans shard boundaries with it before any shard is written.
        """

    @classmethod
    def sample_sizes(cls, keys: Sequence[str], fields: Mapping[str, Sequence[Any]]) -> Any:
        """``sample_size`` of many samples given column-wise, as an int64 numpy array."""
        import numpy as np

        names = sorted(fields)
        columns = [fields[n] for n in names]
        return np.fromiter(
            (
                cls.sample_size(key, dict(zip(names, values, strict=True)))
                for key, *values in zip(keys, *columns, strict=True)
            ),
            dtype=np.int64,
            count=len(keys),
        )

    end_size: ClassVar[int] = 0  # bytes ``finish`` appends after the last sample

    def _write_end(self) -> None:  # noqa: B027 - an optional hook, not an abstract method
        """Emit whatever closes the stream (the tar end-of-archive blocks); nothing by default."""

    def finish(self) -> WrittenShard:
        """Close the shard (not the stream) and return its size, sha256 and index."""
        if self._finished is None:
            self._write_end()
            index = self._index.build(self._pos)
            self._finished = WrittenShard(len(self._index), self._pos, self._sha.hexdigest(), index)
        return self._finished

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.finish()


@dataclass
class ScanEntry:
    """One sample met by a sequential scan: its key, byte span, members and decoded sample."""

    key: str
    start: int
    end: int
    sample: Sample
    members: list[tuple[str, int, int]] = field(default_factory=list)


class ShardReader(ABC):
    """Reads one shard held in a buffer (an mmap for local files).

    With an index, ``reader[i]`` costs O(1) plus the payload read; without one, iteration scans
    the bytes. Payloads are memoryviews into the buffer unless ``copy=True``; views stay valid
    while the reader (or the view itself) is alive. ``companions``: the buffers of the files the
    format keeps beside the shard, by suffix (none for tar and TFRecord).
    """

    format_code: ClassVar[int]

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
        self.name = name
        self.companions = dict(companions or {})
        self._buffer = buffer
        self._view = memoryview(buffer)
        self.copy = copy
        self.verify_crc = verify_crc
        self.index = index
        self._key_array: np.ndarray | None = None
        if index is not None:
            self._check_index(index)

    def _check_index(self, index: ShardIndex) -> None:
        """Cheap proof that the index belongs to these bytes: size, and the first and last sample
        hashes."""
        if index.format_code != self.format_code:
            raise ConfigError(f"{self.name}: the index was built for another shard format")
        index.check_shard_size(len(self._view), self.name)
        for i in {0, len(index) - 1} if len(index) else ():
            start, end = int(index.sample_start[i]), int(index.sample_end[i])
            if hashlib.sha256(self._view[start:end]).digest() != index.sample_hash[i].tobytes():
                raise ShardCorruptError(
                    self.name,
                    f"sample {i} does not match the hash in its index; the index belongs to "
                    "other bytes "
                    "(rebuild it with `datapipe index`) or the shard is damaged (check it "
                    "with `datapipe verify`)",
                    start,
                )

    def _require_index(self) -> ShardIndex:
        if self.index is None:
            raise IndexRequiredError(
                f"{self.name}: random access needs the shard's index; build it with "
                f"`datapipe index {self.name}`"
            )
        return self.index

    def __len__(self) -> int:
        return len(self._require_index())

    def __getitem__(self, i: int) -> Sample:
        index = self._require_index()
        n = len(index)
        if not -n <= i < n:
            raise IndexError(f"{self.name}: sample {i} out of range for {n} samples")
        return self._read(i % n if n else i)

    def __iter__(self) -> Iterator[Sample]:
        if self.index is not None:
            for i in range(len(self.index)):
                yield self._read(i)
        else:
            for entry in self.scan():
                yield entry.sample

    def gather(
        self, indices: Sequence[int], fields: Sequence[str]
    ) -> tuple[list[str], dict[str, list[Any]]]:
        """Keys and per-field payload lists of samples ``indices`` (index order), for batch
        collation.

        SampleError names the first sample that lacks one of ``fields``. Formats whose index
        knows member spans override this with array lookups instead of a dict per sample.
        """
        keys: list[str] = []
        columns: dict[str, list[Any]] = {name: [] for name in fields}
        for i in indices:
            sample = self[int(i)]
            keys.append(sample[KEY])
            for name, column in columns.items():
                if name not in sample:
                    raise SampleError(f"{self.name}: sample {sample[KEY]!r} has no field {name!r}")
                column.append(sample[name])
        return keys, columns

    def key_array(self) -> np.ndarray:
        """Every key of the shard, as ``ShardIndex.key_array`` gives them (built once per
        reader)."""
        if self._key_array is None:
            self._key_array = self._require_index().key_array()
        return self._key_array

    def gather_keys(self, indices: Sequence[int]) -> list[str]:
        """Keys of samples ``indices``."""
        keys = self.key_array()[np.asarray(indices, dtype=np.int64)].tolist()
        # fixed-width keys come back as bytes; decoding each is quicker than numpy's astype("U")
        return list(map(bytes.decode, keys)) if keys and isinstance(keys[0], bytes) else keys

    def keys(self) -> list[str]:
        """Every key in shard order (from the index when present, else by a scan)."""
        if self.index is not None:
            return self.index.keys()
        return [entry.key for entry in self.scan()]

    def build_index(self) -> ShardIndex:
        """Scan the shard and build its index, hashing every sample span."""
        builder = IndexBuilder(self.format_code)
        view = self._view
        for e in self.scan():
            digest = hashlib.sha256(view[e.start : e.end]).digest()
            builder.add(e.key, e.start, e.end, digest, e.members, (k for k in e.sample if k != KEY))
        return builder.build(len(view))

    @abstractmethod
    def scan(self) -> Iterator[ScanEntry]:
        """Walk the bytes from the start without an index, raising ShardCorruptError at bad
        bytes."""

    @abstractmethod
    def _read(self, i: int) -> Sample:
        """Sample ``i`` (0 <= i < len) located through the index."""

    def _payload(self, offset: int, size: int) -> bytes | memoryview:
        view = self._view[offset : offset + size]
        return bytes(view) if self.copy else view

    def drop_pages(self) -> None:
        """Give back the resident pages of a mapped shard (reads map them again from the page
        cache)."""
        drop_pages(self._buffer)

    def close(self) -> None:
        """Release the buffer (an mmap stays open while sample views into it exist)."""
        with contextlib.suppress(BufferError):
            self._view.release()
        for buffer in (self._buffer, *self.companions.values()):
            release(buffer)

    def __enter__(self) -> ShardReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SpanReader(ShardReader):
    """A reader of a format whose payloads are plain byte ranges of the shard (tar's members; not
    TFRecord's, which live inside serialised protos): a batch's payloads can be copied straight
    from the shard's bytes."""

    @abstractmethod
    def spans(self, indices: Sequence[int], field: str) -> tuple[np.ndarray, np.ndarray]:
        """Payload (offsets, sizes) int64 arrays of ``field`` within ``buffer`` for samples
        ``indices``; SampleError names the first sample that lacks the field."""

    @property
    def buffer(self) -> memoryview:
        """The shard's bytes, which ``spans`` index into."""
        return self._view
