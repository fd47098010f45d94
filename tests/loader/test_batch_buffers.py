"""One buffer per batch: packing and unpacking give back every array (aligned views) and every other
value."""

import numpy as np

from datapipe.loader.batch_buffers import ALIGN, numpy_view, pack, unpack


def test_pack_round_trip_keeps_values_dtypes_shapes_and_alignment():
    batch = {
        "__key__": ["a", "b", "c"],
        "cls": np.array([1, -2, 3], dtype=np.int64),
        "img": np.arange(3 * 2 * 5, dtype=np.uint8).reshape(3, 2, 5),
        "bin": (np.frombuffer(b"xyzzy", dtype=np.uint8), np.array([0, 2, 3, 5], dtype=np.int64)),
        "f": np.array([0.5, 1.5, 2.5], dtype=np.float32),
        "json": [{"a": 1}, None, [2]],
    }
    buffer, layout = pack(batch)
    assert buffer.dtype == np.uint8 and buffer.ndim == 1
    for _, kind, spec in layout:
        for start, *_ in [spec] if kind == "array" else spec if kind == "tuple" else []:
            assert start % ALIGN == 0
    back = unpack(buffer, layout, numpy_view)
    assert back["__key__"] == batch["__key__"] and back["json"] == batch["json"]
    for name in ("cls", "img", "f"):
        assert back[name].dtype == batch[name].dtype and (back[name] == batch[name]).all()
    assert bytes(back["bin"][0]) == b"xyzzy" and back["bin"][1].tolist() == [0, 2, 3, 5]
    assert np.shares_memory(back["cls"], buffer)  # views of the one buffer, not copies
