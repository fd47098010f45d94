"""Fixed-size numeric fields at batch level (ASCII numbers parsed in one call, .npy data gathered
after one header read) equal the plain per-sample decoding, and fall back to it whenever the
batch-level path would not be exact."""

import io

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_columns import column_over_two_shards

from datapipe.errors import ConfigError
from datapipe.loader.collate import decode_column
from datapipe.loader.columns import BIG_PAYLOAD, Column


def plain_numbers(payloads: list[bytes], parse: type) -> list:
    return [parse(p) for p in payloads]


numbers = st.one_of(
    st.floats(allow_nan=False, width=64).map(lambda x: repr(x).encode()),
    st.integers(-(2**62), 2**62).map(lambda x: str(x).encode()),
)
# plain decimals, as CSV exports write them: [-+]digits[.digits] with up to 15 digits, dot anywhere
decimals = st.builds(
    lambda sign, digits, dot: (
        sign + digits[:dot] + "." + digits[dot:] if dot is not None else sign + digits
    ).encode(),
    st.sampled_from(["", "-", "+"]),
    st.text("0123456789", min_size=1, max_size=15),
    st.one_of(st.none(), st.integers(0, 15)),
)


@given(st.lists(decimals, min_size=1, max_size=40), st.integers(0, 5))
def test_plain_decimals_parse_at_batch_level_to_the_same_doubles_as_float(payloads, seed):
    column = column_over_two_shards(payloads, seed)
    fast = column.decimals()
    assert fast is not None and fast.dtype == np.float64
    expected = plain_numbers(payloads, float)
    assert fast.tolist() == expected and [np.signbit(v) for v in fast] == [
        np.signbit(v) for v in expected
    ]
    assert decode_column(column, "float").tolist() == expected


@given(st.lists(st.one_of(numbers, decimals), min_size=1, max_size=40), st.integers(0, 5))
def test_any_ascii_floats_decode_like_float_of_each(payloads, seed):
    values = decode_column(column_over_two_shards(payloads, seed), "float")
    assert values.dtype == np.float64 and values.tolist() == plain_numbers(payloads, float)


def test_decimals_at_the_end_of_a_buffer_are_parsed_too():
    # a pread copy starts with its first payload: no window of the full width ends at a short one
    # there
    column = Column(3)
    column.add_spans(
        np.array([2, 0, 1]), memoryview(b"1.25-3.5+7"), np.array([0, 4, 8]), np.array([4, 4, 2])
    )
    assert column.decimals().tolist() == [-3.5, 7.0, 1.25]


@given(
    st.lists(st.integers(-(2**62), 2**62).map(lambda x: str(x).encode()), min_size=1, max_size=40)
)
def test_ascii_integers_with_signs_parse_like_int_of_each(payloads):
    values = decode_column(column_over_two_shards(payloads), "int")
    assert values.dtype == np.int64 and values.tolist() == plain_numbers(payloads, int)


@pytest.mark.parametrize(
    "payloads",
    [
        [b"nan", b"inf", b"-inf", b"-0.0"],
        [b" 2.5", b"1"],  # whitespace a payload holds
        [b"1_000", b"2"],  # Python's syntax
        [b"1e3", b"2"],  # exponents
        [b"0.12345678901234567", b"2"],  # more digits than a double holds exactly
        [b"1.2.3", b"2"],
        [b"-", b"2"],
        [b".", b"2"],
    ],
)
def test_other_numbers_are_parsed_payload_by_payload(payloads):
    column = column_over_two_shards(payloads)
    assert column.decimals() is None
    try:
        expected = np.array(plain_numbers(payloads, float))
    except ValueError:
        with pytest.raises(ConfigError, match="not one (int64|float64) number"):
            decode_column(column, "float")
        return
    assert np.array_equal(decode_column(column, "float"), expected, equal_nan=True)


def test_numbers_that_are_not_plain_decimals_are_cast_as_one_fixed_width_array():
    payloads = [repr(x).encode() for x in (0.1 + 0.2, 1e-300, -2.5e17, 1 / 3)] + [
        b"1_000",
        b" 7 ",
        b"nan",
    ]
    column = column_over_two_shards(payloads)
    assert column.decimals() is None and column.strings().tolist() == payloads
    assert np.array_equal(
        decode_column(column, "float"), plain_numbers(payloads, float), equal_nan=True
    )
    # the 'S' dtype would drop the NUL
    assert column_over_two_shards([b"1\x00", b"2"]).strings() is None
    assert decode_column(column_over_two_shards([b"-3", b"+4", b" 5"]), "int").tolist() == [
        -3,
        4,
        5,
    ]


@pytest.mark.parametrize(
    "payloads",
    [
        [b"1 2", b""],
        [b"1", b""],
        [b"1", b"x"],
        [b"1.5", b"2"],
        [b"1\x00", b"2"],
        [b"-99999999999999999999", b"2"],
    ],
)
def test_a_payload_that_is_not_one_number_is_an_error_not_a_batch_of_another_length(payloads):
    decoder = "int" if b"1.5" in payloads or b"-9" in payloads[0] else "float"
    with pytest.raises(ConfigError, match="not one (int64|float64) number"):
        decode_column(column_over_two_shards(payloads), decoder)


def npy(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, array, version=version, allow_pickle=False)
    return out.getvalue()


def plain_npy(payloads: list[bytes]) -> object:
    arrays = [np.load(io.BytesIO(p), allow_pickle=False) for p in payloads]
    same = len({(a.shape, a.dtype) for a in arrays}) == 1
    return np.stack(arrays) if same else arrays


rng = np.random.default_rng(0)
SAME = {  # arrays of one dtype and shape: gathered at batch level
    "float32 3x4": [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(20)],
    "int16 vector": [rng.integers(-999, 999, 5).astype(np.int16) for _ in range(9)],
    "scalars": [np.float64(i / 3) * np.ones(()) for i in range(7)],
    "big-endian": [np.arange(4, dtype=">i4") + i for i in range(6)],
    "bool": [rng.integers(0, 2, (2, 2)).astype(bool) for _ in range(5)],
    "empty": [np.zeros((0, 3), np.float32) for _ in range(4)],
    "big payloads": [rng.standard_normal(BIG_PAYLOAD // 8 + 3) for _ in range(5)],
    "header 2.0": [np.arange(6, dtype=np.uint8).reshape(2, 3) + i for i in range(5)],
}
OTHER = {  # per sample: the plain path, for an exact result
    "shapes differ": [np.zeros(3), np.zeros(4), np.zeros(3)],
    "same size, dtypes differ": [
        np.zeros(2, np.float32),
        np.ones(2, np.int32),
        np.zeros(2, np.float32),
    ],
    "same size, shapes differ": [np.zeros((2, 3)), np.zeros((3, 2)), np.zeros((2, 3))],
    "fortran order": [np.asfortranarray(rng.standard_normal((3, 2))) for _ in range(4)],
}


@pytest.mark.parametrize("name", list(SAME))
def test_npy_arrays_of_one_kind_are_gathered_into_the_batch_buffer(name):
    payloads = [npy(a, (2, 0) if name == "header 2.0" else None) for a in SAME[name]]
    target = np.zeros(sum(a.nbytes for a in SAME[name]) + 64, dtype=np.uint8)
    values = decode_column(
        column_over_two_shards(payloads, seed=2), "npy", allocate=lambda n: target[:n]
    )
    expected = plain_npy(payloads)
    assert (
        values.dtype == expected.dtype
        and values.shape == expected.shape
        and np.array_equal(values, expected)
    )
    # gathered, not np.load-ed and stacked
    assert values.size == 0 or np.shares_memory(values, target)


@pytest.mark.parametrize("name", list(OTHER))
def test_npy_arrays_of_several_kinds_are_loaded_one_by_one(name):
    payloads = [npy(a) for a in OTHER[name]]
    values = decode_column(column_over_two_shards(payloads, seed=1), "npy")
    expected = plain_npy(payloads)
    if isinstance(expected, list):
        assert isinstance(values, list) and len(values) == len(expected)
        assert all(
            a.dtype == b.dtype and np.array_equal(a, b)
            for a, b in zip(values, expected, strict=True)
        )
    else:
        assert values.dtype == expected.dtype and np.array_equal(values, expected)
