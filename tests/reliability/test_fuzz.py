"""Fuzzing the readers and the index parser with hypothesis: mutated shards and indexes give
ShardCorruptError (or a clean read), never another exception and never a hang. CI runs a few
thousand inputs; README.md here says how to run a long campaign."""

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sample_data import simple_samples

from datapipe.errors import FormatVersionError, ShardCorruptError
from datapipe.formats.index import ShardIndex
from datapipe.formats.registry import FORMATS
from datapipe.formats.shards import write_shard

EXAMPLES = int(os.environ.get("DATAPIPE_FUZZ_EXAMPLES", 1000))
# the token format's samples need ``tokens`` ids and its files are fuzzed in tests/formats/tokens
GENERIC = sorted(name for name, f in FORMATS.items() if not f.writer.required_fields)
_SHARDS: dict[str, tuple[bytes, bytes]] = {}


def valid(fmt: str, tmp_path_factory) -> tuple[bytes, bytes]:
    if fmt not in _SHARDS:
        path = tmp_path_factory.mktemp("fuzz") / f"s{FORMATS[fmt].extension}"
        write_shard(path, simple_samples(5, size=40), fmt)
        _SHARDS[fmt] = (path.read_bytes(), open(f"{path}.idx", "rb").read())
    return _SHARDS[fmt]


mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "cut", "insert", "set"]),
        st.integers(0, 10**6),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=4,
)


def mutate(data: bytes, edits) -> bytes:
    out = bytearray(data)
    for kind, where, value in edits:
        if not out:
            break
        i = where % len(out)
        if kind == "flip":
            out[i] ^= value or 1
        elif kind == "cut":
            del out[i:]
        elif kind == "insert":
            out[i:i] = bytes([value]) * (value % 7 + 1)
        else:
            out[i] = value
    return bytes(out)


def read_all(fmt: str, data: bytes) -> None:
    reader = FORMATS[fmt].reader(data, "fuzzed", None)
    for _ in reader.scan():
        pass


FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(st.sampled_from(GENERIC), mutations)
def test_mutated_shards_scan_or_fail_cleanly(tmp_path_factory, fmt, edits):
    shard, _ = valid(fmt, tmp_path_factory)
    try:
        read_all(fmt, mutate(shard, edits))
    except ShardCorruptError:
        pass


@FUZZ
@given(st.sampled_from(GENERIC), mutations)
def test_mutated_indexes_parse_or_fail_cleanly(tmp_path_factory, fmt, edits):
    _, index = valid(fmt, tmp_path_factory)
    try:
        ShardIndex.from_bytes(mutate(index, edits), "fuzzed.idx")
    except (ShardCorruptError, FormatVersionError):
        pass


@FUZZ
@given(st.sampled_from(GENERIC), st.binary(max_size=4096))
def test_random_bytes_are_never_a_shard_by_accident(fmt, data):
    try:
        read_all(fmt, data)
    except ShardCorruptError:
        pass
