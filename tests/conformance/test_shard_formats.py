"""One suite, every shard format: round trips, determinism, indexes and corruption."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sample_data import field_names, keys, payload, plain, simple_samples

from datapipe.errors import ConfigError, SampleError, ShardCorruptError
from datapipe.formats.base import KEY, SpanReader
from datapipe.formats.registry import FORMATS, ShardFormat
from datapipe.formats.shards import build_index, index_path, open_shard, read_index, write_shard

# formats that store any bytes fields; the token format (its samples need ``tokens`` ids) has
# its own suite in tests/formats/tokens
GENERIC = {name: f for name, f in FORMATS.items() if not f.writer.required_fields}


@pytest.fixture(params=sorted(GENERIC), ids=str)
def fmt(request) -> ShardFormat:
    return GENERIC[request.param]


def shard_path(tmp_path: Path, fmt: ShardFormat, name: str = "shard") -> Path:
    return tmp_path / f"{name}{fmt.extension}"


def read_all(path: Path, **kw) -> list[dict]:
    with open_shard(path, **kw) as reader:
        return [plain(s) for s in reader]


@st.composite
def sample_lists(draw, allow_dots: bool, max_samples: int, sizes: st.SearchStrategy[int]):
    n = draw(st.integers(0, max_samples))
    sample_keys = draw(st.lists(keys(allow_dots), min_size=n, max_size=n, unique=True))
    samples = []
    for i, key in enumerate(sample_keys):
        names = draw(st.lists(field_names, min_size=1, max_size=20, unique=True))
        samples.append(
            {KEY: key, **{name: payload(draw(sizes), hash((i, name))) for name in names}}
        )
    return samples


def check_round_trip(tmp_path: Path, fmt: ShardFormat, samples: list[dict]) -> None:
    path = shard_path(tmp_path, fmt)
    written = write_shard(path, samples)
    assert written.samples == len(samples)
    assert written.size == path.stat().st_size
    assert written.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    expected = [plain(s) for s in samples]
    assert read_all(path) == expected  # through the index
    assert read_all(path, index=False) == expected  # by scanning
    with open_shard(path) as reader:
        assert len(reader) == len(samples)
        assert reader.keys() == [s[KEY] for s in samples]
        for i in reversed(range(len(samples))):  # random access, any order
            assert plain(reader[i]) == expected[i]
        if samples:
            assert plain(reader[-1]) == expected[-1]
        with pytest.raises(IndexError):
            reader[len(samples)]
        # the index a scan builds is the one the writer built, byte for byte
        assert reader.build_index().to_bytes() == written.index.to_bytes()
        # payloads are byte ranges of the shard: spans find them
        if isinstance(reader, SpanReader) and samples:
            rows = list(range(len(samples)))[::-1]
            for name in sorted(set.intersection(*(set(s) - {KEY} for s in samples))):
                offsets, sizes = reader.spans(rows, name)
                found = [
                    bytes(reader.buffer[a : a + b])
                    for a, b in zip(offsets.tolist(), sizes.tolist(), strict=True)
                ]
                assert found == [bytes(samples[i][name]) for i in rows]


class TestRoundTrip:
    @given(data=st.data())
    def test_many_small_samples(self, tmp_path_factory, fmt, data):
        samples = data.draw(sample_lists(fmt.writer.allow_dots_in_keys, 300, st.integers(0, 700)))
        check_round_trip(tmp_path_factory.mktemp("rt"), fmt, samples)

    @given(data=st.data())
    def test_few_large_samples(self, tmp_path_factory, fmt, data):
        sizes = st.sampled_from([0, 1, 511, 512, 513, 65536, 3 * 2**20 + 7])
        samples = data.draw(sample_lists(fmt.writer.allow_dots_in_keys, 4, sizes))
        check_round_trip(tmp_path_factory.mktemp("rt"), fmt, samples)

    def test_thousands_of_samples(self, tmp_path, fmt):
        check_round_trip(tmp_path, fmt, simple_samples(5000, size=64))

    def test_empty_shard(self, tmp_path, fmt):
        check_round_trip(tmp_path, fmt, [])

    def test_empty_payloads(self, tmp_path, fmt):
        check_round_trip(tmp_path, fmt, [{KEY: "a", "x": b""}, {KEY: "b", "x": b"", "y": b""}])

    def test_copy_gives_bytes(self, tmp_path, fmt):
        path = shard_path(tmp_path, fmt)
        write_shard(path, simple_samples(3))
        with open_shard(path, copy=True) as reader:
            assert isinstance(reader[1]["bin"], bytes)


class TestDeterminism:
    def test_same_samples_same_bytes(self, tmp_path, fmt):
        samples = simple_samples(500, size=300, seed=7)
        a = write_shard(shard_path(tmp_path, fmt, "a"), samples)
        b = write_shard(shard_path(tmp_path, fmt, "b"), samples)
        assert a.sha256 == b.sha256
        assert (
            index_path(shard_path(tmp_path, fmt, "a")).read_bytes()
            == index_path(shard_path(tmp_path, fmt, "b")).read_bytes()
        )

    def test_field_order_does_not_matter(self, tmp_path, fmt):
        forward = [{KEY: "k", "a": b"1", "b": b"2", "c": b"3"}]
        backward = [{KEY: "k", "c": b"3", "b": b"2", "a": b"1"}]
        assert (
            write_shard(shard_path(tmp_path, fmt, "f"), forward).sha256
            == write_shard(shard_path(tmp_path, fmt, "b"), backward).sha256
        )


class TestKeysAndFields:
    @pytest.mark.parametrize("key", ["", "a/b", "nul\x00", "tab\tkey", 7, None])
    def test_bad_keys_refused(self, tmp_path, fmt, key):
        with pytest.raises(SampleError):
            write_shard(shard_path(tmp_path, fmt), [{KEY: key, "x": b"1"}])

    def test_dotted_keys(self, tmp_path, fmt):
        samples = [{KEY: "img.001", "x": b"1"}]
        if fmt.writer.allow_dots_in_keys:
            check_round_trip(tmp_path, fmt, samples)
        else:
            with pytest.raises(SampleError, match="'.'"):
                write_shard(shard_path(tmp_path, fmt), samples)

    def test_duplicate_key_refused(self, tmp_path, fmt):
        with pytest.raises(SampleError, match="twice"):
            write_shard(shard_path(tmp_path, fmt), [{KEY: "a", "x": b"1"}, {KEY: "a", "x": b"2"}])

    @pytest.mark.parametrize("field", ["", "a/b", "__meta__"])
    def test_bad_field_names_refused(self, tmp_path, fmt, field):
        with pytest.raises(SampleError):
            write_shard(shard_path(tmp_path, fmt), [{KEY: "a", field: b"1"}])

    def test_unstorable_value_names_key_and_field(self, tmp_path, fmt):
        with pytest.raises(SampleError, match="'k'.*'x'"):
            write_shard(shard_path(tmp_path, fmt), [{KEY: "k", "x": {"a": 1}}])

    def test_failed_write_leaves_no_file(self, tmp_path, fmt):
        path = shard_path(tmp_path, fmt)
        with pytest.raises(SampleError):
            write_shard(path, [{KEY: "a", "x": b"1"}, {KEY: "b/c", "x": b"2"}])
        assert list(tmp_path.iterdir()) == []


class _Shard(tuple):
    """(path, original bytes, sample end offsets), with a short repr for hypothesis reports."""

    def __new__(cls, *parts):
        return super().__new__(cls, parts)

    def __repr__(self) -> str:
        return f"<shard {self[0].name}, {len(self[1])} bytes>"


def _scan_until_error(path: Path) -> tuple[list[dict], ShardCorruptError | None]:
    """Samples a scan yields before it stops, and the error it stopped with (if any)."""
    got: list[dict] = []
    try:
        with open_shard(path, index=False) as reader:
            for sample in reader:
                got.append(plain(sample))
    except ShardCorruptError as e:
        return got, e
    return got, None


class TestCorruption:
    SAMPLES = simple_samples(40, size=700, seed=3)

    @pytest.fixture
    def shard(self, tmp_path, fmt) -> _Shard:
        path = shard_path(tmp_path, fmt)
        written = write_shard(path, self.SAMPLES)
        return _Shard(path, path.read_bytes(), {0, *written.index.sample_end.tolist()})

    @given(cut=st.floats(0, 1, exclude_max=True))
    def test_truncation(self, shard, fmt, cut):
        path, data, sample_ends = shard
        at = int(len(data) * cut)
        path.write_bytes(data[:at])
        got, error = _scan_until_error(path)
        expected = [plain(s) for s in self.SAMPLES]
        assert got == expected[: len(got)]  # only correct samples
        if error is None:
            # TFRecord has no end marker: only a cut exactly between records can go unnoticed
            # nothing lost (the cut only took end-of-archive padding), or a TFRecord cut exactly
            # between records, which no reader can notice without the index (TFRecord has no end
            # marker)
            assert got == expected or (fmt.name == "tfrecord" and at in sample_ends)
        else:
            assert str(path) in str(error) and error.offset is not None
        # with its index, a truncated shard is refused outright
        with pytest.raises(ShardCorruptError, match="index"):
            open_shard(path)

    @given(position=st.floats(0, 1, exclude_max=True), mask=st.integers(1, 255))
    def test_flipped_byte(self, shard, fmt, position, mask):
        path, data, _ = shard
        at = int(len(data) * position)
        flipped = bytearray(data)
        flipped[at] ^= mask
        path.write_bytes(flipped)
        got, error = _scan_until_error(path)
        expected = [plain(s) for s in self.SAMPLES]
        differing = [i for i, s in enumerate(got) if s != expected[i]]
        if fmt.name == "tfrecord":
            assert differing == []  # CRCs catch every flip
        else:
            # tar payloads carry no checksum: at most one sample differs, by exactly that byte
            assert len(differing) <= 1
            for i in differing:
                changed = {f for f in got[i] if got[i][f] != expected[i][f]}
                assert len(changed) == 1
                (field,) = changed
                diff = [
                    a ^ b for a, b in zip(got[i][field], expected[i][field], strict=True) if a != b
                ]
                assert diff == [mask]
        if error is not None:
            assert str(path) in str(error)
        if error is None and not differing:
            assert got == expected  # the flip hit padding or a region that changes nothing

    def test_zero_length_file(self, tmp_path, fmt):
        path = shard_path(tmp_path, fmt)
        path.write_bytes(b"")
        got, error = _scan_until_error(path)
        assert got == []
        if fmt.name == "tfrecord":
            assert error is None  # an empty TFRecord file is a valid empty shard
        else:
            assert error is not None and "end-of-archive" in str(error)

    def test_index_of_another_shard_is_refused(self, tmp_path, fmt):
        a, b = shard_path(tmp_path, fmt, "a"), shard_path(tmp_path, fmt, "b")
        write_shard(a, simple_samples(10, seed=1))
        write_shard(b, simple_samples(10, seed=2))  # same sizes, other payloads
        assert a.stat().st_size == b.stat().st_size
        index_path(a).write_bytes(index_path(b).read_bytes())
        with pytest.raises(ShardCorruptError, match="does not match the hash"):
            open_shard(a)

    def test_random_access_without_index_says_how_to_fix(self, tmp_path, fmt):
        path = shard_path(tmp_path, fmt)
        write_shard(path, simple_samples(3), index=False)
        with open_shard(path) as reader, pytest.raises(ConfigError, match="datapipe index"):
            reader[0]

    def test_build_index_of_unindexed_shard(self, tmp_path, fmt):
        path = shard_path(tmp_path, fmt)
        written = write_shard(path, simple_samples(30), index=False)
        assert read_index(path) is None
        _, built = build_index(path)
        assert built.to_bytes() == written.index.to_bytes()


def test_large_shard_is_mapped_not_read(tmp_path):
    """Opening a shard maps it: random access to the last sample works without reading the rest."""
    path = tmp_path / "big.tar"
    write_shard(path, ({KEY: f"s{i}", "bin": os.urandom(1 << 16)} for i in range(400)))
    with open_shard(path) as reader:
        assert len(bytes(reader[399]["bin"])) == 1 << 16


@given(data=st.data())
def test_mangled_shards_fail_only_with_shard_corrupt_error(tmp_path_factory, fmt, data):
    """Several flips, splices and a cut at once: reading ends normally or with ShardCorruptError."""
    path = shard_path(tmp_path_factory.mktemp("fuzz"), fmt)
    write_shard(path, simple_samples(6, size=data.draw(st.sampled_from([0, 10, 600]))), index=False)
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if raw:
            raw[at : at + 8] = data.draw(st.binary(min_size=1, max_size=8))
    raw = raw[: data.draw(st.integers(0, len(raw)))]
    path.write_bytes(raw)
    try:
        with open_shard(path, index=False) as reader:
            for _ in reader:
                pass
    except ShardCorruptError as e:
        assert str(path) in str(e)


@given(samples=sample_lists(allow_dots=False, max_samples=8, sizes=st.integers(0, 3000)))
def test_sample_size_predicts_the_bytes_written(tmp_path_factory, samples):
    """The build plans shard boundaries from sample_size before writing; it must be exact."""
    for fmt in GENERIC.values():
        path = shard_path(tmp_path_factory.mktemp("size"), fmt)
        written = write_shard(path, samples)
        predicted = sum(
            fmt.writer.sample_size(s[KEY], {k: v for k, v in s.items() if k != KEY})
            for s in samples
        )
        assert written.size == predicted + fmt.writer.end_size


@given(samples=sample_lists(allow_dots=False, max_samples=8, sizes=st.integers(0, 3000)))
def test_sample_sizes_column_wise_equal_sample_size(samples):
    for fmt in GENERIC.values():
        names = sorted({n for s in samples for n in s if n != KEY})
        complete = [s for s in samples if all(n in s for n in names)]
        keys = [s[KEY] for s in complete]
        columns = {n: [s[n] for s in complete] for n in names}
        expected = [fmt.writer.sample_size(s[KEY], {n: s[n] for n in names}) for s in complete]
        assert fmt.writer.sample_sizes(keys, columns).tolist() == expected
