"""Field encoding: each value type's bytes (tar) and feature (TFRecord), and the column-wise fast
path giving exactly the bytes of encoding row by row."""

import io
import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datapipe.builder.encode import (
    EncodedRows,
    MissingValue,
    SampleEncoder,
    encode_columns,
    encode_value,
)
from datapipe.errors import SampleError
from datapipe.formats.base import KEY
from datapipe.formats.registry import get_format
from datapipe.formats.shards import open_shard, write_shard
from datapipe.formats.tfrecord.example import Example


@pytest.mark.parametrize(
    ("value", "payload", "kind"),
    [
        (7, b"7", "int"),
        (-12, b"-12", "int"),
        (np.int64(2**62), str(2**62).encode(), "int"),
        (np.uint8(255), b"255", "int"),
        (True, b"1", "int"),
        (np.bool_(False), b"0", "int"),
        (0.1, b"0.1", "float"),
        (np.float32(0.5), b"0.5", "float"),
        (1e300, b"1e+300", "float"),
        ("héllo", "héllo".encode(), "str"),
        ("", b"", "str"),
        (b"\x00\xff raw", b"\x00\xff raw", "bytes"),
        (bytearray(b"ab"), b"ab", "bytes"),
        ({"b": 1, "a": [1, 2.5, None]}, b'{"b":1,"a":[1,2.5,null]}', "json"),
        ([1, "x", {"y": True}], b'[1,"x",{"y":true}]', "json"),
        (
            {"n": np.int32(3), "arr": np.arange(2), "raw": b"\x01"},
            b'{"n":3,"arr":[0,1],"raw":"base64:AQ=="}',
            "json",
        ),
        ({"é": "ü"}, '{"é":"ü"}'.encode(), "json"),
        (pd.Timestamp("2024-01-02T03:04:05"), b"2024-01-02T03:04:05", "str"),
    ],
)
def test_tar_payload_of_each_type(value, payload, kind):
    assert encode_value(value, numeric=False) == (payload, kind)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.uint8).reshape(3, 4),
        np.linspace(0, 1, 5, dtype=np.float32),
        np.array([[True, False]]),
        np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)),
        np.zeros((0, 3), dtype=np.float64),
    ],
)
def test_numpy_arrays_become_npy_with_dtype_and_shape(array):
    for numeric in (False, True):  # TFRecord keeps the same .npy bytes in a bytes feature
        payload, kind = encode_value(array, numeric=numeric)
        assert kind == "npy" and payload.startswith(b"\x93NUMPY")
        back = np.load(io.BytesIO(payload), allow_pickle=False)
        assert (
            back.dtype == array.dtype and back.shape == array.shape and np.array_equal(back, array)
        )


@pytest.mark.parametrize("value", [None, float("nan"), np.float32("nan"), pd.NA, pd.NaT])
def test_missing_values_are_not_encoded(value):
    with pytest.raises(MissingValue):
        encode_value(value, numeric=False)


def test_values_that_cannot_be_encoded_say_so():
    with pytest.raises(SampleError, match="object arrays"):
        encode_value(np.array([1, "a"], dtype=object), numeric=False)
    with pytest.raises(SampleError, match="cannot encode a value of type object"):
        encode_value(object(), numeric=False)
    with pytest.raises(ValueError):  # NaN inside JSON is not valid JSON
        encode_value({"x": float("inf")}, numeric=False)


def test_numeric_kinds_stay_numbers_for_tfrecord():
    assert encode_value(5, numeric=True) == (5, "int")
    assert encode_value(np.bool_(True), numeric=True) == (1, "int")
    assert encode_value(2.25, numeric=True) == (2.25, "float")
    assert encode_value("s", numeric=True) == (b"s", "str")
    assert encode_value([1, 2], numeric=True) == (b"[1,2]", "json")


def test_tfrecord_features_by_type(tmp_path):
    encoder = SampleEncoder(
        "id",
        {
            "cls": "label",
            "score": "score",
            "txt": "name",
            "bin": "blob",
            "npy": "arr",
            "json": ["label", "name"],
        },
        numeric=True,
        allow_dots_in_keys=True,
    )
    row = {
        "id": "k.1",
        "label": np.int64(7),
        "score": 0.5,
        "name": "héllo",
        "blob": b"\x00\x01",
        "arr": np.arange(3, dtype=np.int16),
    }
    key, fields, kinds = encoder.encode(row)
    assert key == "k.1"  # TFRecord keys may hold dots
    assert kinds == {
        "cls": "int",
        "score": "float",
        "txt": "str",
        "bin": "bytes",
        "npy": "npy",
        "json": "json",
    }
    write_shard(tmp_path / "s.tfrecord", [{KEY: key, **fields}])
    raw = (tmp_path / "s.tfrecord").read_bytes()
    length = int.from_bytes(raw[:8], "little")
    example = Example.FromString(raw[12 : 12 + length])
    features = example.features.feature
    assert {name: features[name].WhichOneof("kind") for name in features} == {
        KEY: "bytes_list",
        "cls": "int64_list",
        "score": "float_list",
        "txt": "bytes_list",
        "bin": "bytes_list",
        "npy": "bytes_list",
        "json": "bytes_list",
    }
    assert list(features["cls"].int64_list.value) == [7] and list(
        features["score"].float_list.value
    ) == [0.5]
    assert features["txt"].bytes_list.value[0] == "héllo".encode()
    assert json.loads(features["json"].bytes_list.value[0]) == {"label": 7, "name": "héllo"}
    with open_shard(tmp_path / "s.tfrecord", copy=True) as reader:
        sample = dict(reader[0])
    assert np.load(io.BytesIO(sample["npy"])).tolist() == [0, 1, 2] and sample["bin"] == b"\x00\x01"


def test_a_field_of_several_columns_is_one_json_object():
    encoder = SampleEncoder("id", {"json": ["a", "b"]}, numeric=False, allow_dots_in_keys=False)
    assert encoder.encode({"id": 3, "a": np.float64(1.5), "b": [1]})[1] == {
        "json": b'{"a":1.5,"b":[1]}'
    }


# --- the column-wise fast path --------------------------------------------------------------------


def _one_by_one(encoder: SampleEncoder, frame: pd.DataFrame) -> EncodedRows:
    out = EncodedRows([], [], {name: [] for name in encoder.fields}, {}, {})
    for row, values in zip(
        frame.index, frame[encoder.columns].itertuples(index=False), strict=True
    ):
        try:
            key, fields, kinds = encoder.encode(dict(zip(encoder.columns, values, strict=True)))
        except SampleError as e:
            out.rejects[int(row)] = str(e)
            continue
        out.rows.append(int(row))
        out.keys.append(key)
        for name, payload in fields.items():
            out.fields[name].append(payload)
            out.kinds.setdefault(name, set()).add(kinds[name])
    return out


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
scalars = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, width=64),
    texts,
    st.binary(max_size=6),
    st.booleans(),
)
nested = st.recursive(
    st.one_of(st.none(), st.integers(-1000, 1000), texts, st.booleans()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def columns(draw, n: int):
    kind = draw(
        st.sampled_from(
            [
                "int",
                "uint8",
                "Int64",
                "float",
                "float32",
                "str",
                "bytes",
                "bool",
                "mixed",
                "nested",
                "arrays",
            ]
        )
    )
    if kind == "int":
        return pd.Series(
            draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)), dtype="int64"
        )
    if kind == "uint8":
        return pd.Series(draw(st.lists(st.integers(0, 255), min_size=n, max_size=n)), dtype="uint8")
    if kind == "Int64":
        return pd.Series(
            draw(st.lists(st.none() | st.integers(-(10**9), 10**9), min_size=n, max_size=n)),
            dtype="Int64",
        )
    if kind in ("float", "float32"):
        values = draw(
            st.lists(
                st.floats(allow_nan=True, width=32 if kind == "float32" else 64),
                min_size=n,
                max_size=n,
            )
        )
        return pd.Series(
            values, dtype=kind.replace("float", "float64") if kind == "float" else "float32"
        )
    if kind == "str":
        return pd.Series(draw(st.lists(texts, min_size=n, max_size=n)), dtype=object)
    if kind == "bytes":
        return pd.Series(
            draw(st.lists(st.binary(max_size=8), min_size=n, max_size=n)), dtype=object
        )
    if kind == "bool":
        return pd.Series(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    if kind == "nested":
        return pd.Series(draw(st.lists(nested, min_size=n, max_size=n)), dtype=object)
    if kind == "arrays":
        return pd.Series(
            [np.arange(draw(st.integers(0, 4)), dtype=np.int32) for _ in range(n)], dtype=object
        )
    return pd.Series(draw(st.lists(scalars, min_size=n, max_size=n)), dtype=object)


@st.composite
def frames(draw):
    n = draw(st.integers(0, 12))
    keys = draw(
        st.one_of(
            st.lists(st.integers(0, 10**6), min_size=n, max_size=n).map(
                lambda v: pd.Series(v, dtype="int64")
            ),
            st.lists(st.text("ab.c/_-\n", min_size=0, max_size=4), min_size=n, max_size=n).map(
                lambda v: pd.Series(v, dtype=object)
            ),
            st.lists(
                st.none() | st.text("xyz", min_size=1, max_size=3), min_size=n, max_size=n
            ).map(lambda v: pd.Series(v, dtype=object)),
        )
    )
    data = {"key": keys.to_numpy()}
    for i in range(draw(st.integers(1, 3))):
        data[f"c{i}"] = draw(columns(n)).to_numpy()
    frame = pd.DataFrame(
        {k: pd.Series(v, dtype=getattr(v, "dtype", None)) for k, v in data.items()}
    )
    frame.index = pd.RangeIndex(n) * 3 + 5  # row ids are not positions
    return frame


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame=frames(), multi=st.booleans())
def test_column_wise_encoding_gives_the_bytes_of_row_by_row(fmt, frame, multi):
    writer = get_format(fmt).writer
    names = [c for c in frame.columns if c != "key"]
    fields = {f"f{i}": col for i, col in enumerate(names)}
    if multi:
        fields["json"] = names
    encoder = SampleEncoder(
        "key", fields, numeric=fmt == "tfrecord", allow_dots_in_keys=writer.allow_dots_in_keys
    )
    fast, slow = encode_columns(encoder, frame), _one_by_one(encoder, frame)
    assert (fast.rows, fast.keys, fast.rejects) == (slow.rows, slow.keys, slow.rejects)
    assert fast.fields == slow.fields and fast.kinds == slow.kinds
    if not fast.keys or len(set(fast.keys)) != len(fast.keys):
        return
    # the writer's column-wise block has the bytes that writing each sample one by one gives
    block = writer.encode_samples(fast.keys, fast.fields)
    assert bytes(memoryview(block.data).cast("B")) == _written_one_by_one(writer, fast.samples())
    assert np.array_equal(
        block.bounds[1:] - block.bounds[:-1], writer.sample_sizes(fast.keys, fast.fields)
    )


def _written_one_by_one(writer, samples) -> bytes:
    """The bytes ``writer`` emits for ``samples`` written one at a time."""
    out = io.BytesIO()
    one_by_one = writer(out)
    for sample in samples:
        one_by_one.write(sample)
    return out.getvalue()


def test_clean_typed_columns_take_the_fast_path_and_match(monkeypatch):
    import datapipe.builder.encode as encode

    frame = pd.DataFrame(
        {
            "key": [f"k{i}" for i in range(50)],
            "n": np.arange(50, dtype=np.int64) - 25,
            "x": np.linspace(-1, 1, 50),
            "s": [f"é{i}" for i in range(50)],
            "b": [bytes([i]) * i for i in range(50)],
            "u": np.arange(50, dtype=np.uint16),
        }
    )
    for fmt in ("webdataset", "tfrecord"):
        writer = get_format(fmt).writer
        encoder = SampleEncoder(
            "key",
            {"cls": "n", "x": "x", "txt": "s", "bin": "b", "u": "u"},
            numeric=fmt == "tfrecord",
            allow_dots_in_keys=writer.allow_dots_in_keys,
        )
        slow = _one_by_one(encoder, frame)
        with monkeypatch.context() as m:
            m.setattr(
                encode, "_encode_rows_one_by_one", lambda *a: pytest.fail("left the fast path")
            )
            fast = encode_columns(encoder, frame)
        assert fast.keys == slow.keys and fast.fields == slow.fields and fast.kinds == slow.kinds
        block = writer.encode_samples(fast.keys, fast.fields)
        assert bytes(memoryview(block.data).cast("B")) == _written_one_by_one(
            writer, fast.samples()
        )
