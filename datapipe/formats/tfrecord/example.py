"""tf.train.Example encoding of samples, with the message classes built from a descriptor (no
TensorFlow).

Field values map to features by type: bytes-like -> bytes_list; int, bool or an integer numpy
array -> int64_list; float or a float array -> float_list; a list of bytes -> bytes_list with
several values. Reading gives back bytes for a one-value bytes_list, a list of bytes otherwise,
and 1-D numpy arrays (int64, float32) for numeric lists. The sample key travels as the bytes
feature '__key__'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from datapipe.errors import SampleError
from datapipe.formats.base import KEY

_F = descriptor_pb2.FieldDescriptorProto


def _field(
    name: str,
    number: int,
    kind: int,
    label: int = _F.LABEL_OPTIONAL,
    type_name: str = "",
    **kw: Any,
):
    if type_name:
        kw["type_name"] = type_name
    return _F(name=name, number=number, type=kind, label=label, **kw)


def _example_file() -> descriptor_pb2.FileDescriptorProto:
    """tensorflow/core/example/{example,feature}.proto, as a descriptor."""
    f = descriptor_pb2.FileDescriptorProto(
        name="datapipe/tf_example.proto", package="tensorflow", syntax="proto3"
    )
    rep = _F.LABEL_REPEATED
    f.message_type.add(name="BytesList").field.append(_field("value", 1, _F.TYPE_BYTES, rep))
    f.message_type.add(name="FloatList").field.append(_field("value", 1, _F.TYPE_FLOAT, rep))
    f.message_type.add(name="Int64List").field.append(_field("value", 1, _F.TYPE_INT64, rep))
    feature = f.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, msg) in enumerate(
        [("bytes_list", "BytesList"), ("float_list", "FloatList"), ("int64_list", "Int64List")],
        start=1,
    ):
        feature.field.append(
            _field(name, number, _F.TYPE_MESSAGE, type_name=f".tensorflow.{msg}", oneof_index=0)
        )
    features = f.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.append(_field("key", 1, _F.TYPE_STRING))
    entry.field.append(_field("value", 2, _F.TYPE_MESSAGE, type_name=".tensorflow.Feature"))
    features.field.append(
        _field("feature", 1, _F.TYPE_MESSAGE, rep, ".tensorflow.Features.FeatureEntry")
    )
    example = f.message_type.add(name="Example")
    example.field.append(_field("features", 1, _F.TYPE_MESSAGE, type_name=".tensorflow.Features"))
    return f


# A private pool: TensorFlow or the tfrecord package may register 'tensorflow.Example' in the
# default one.
_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_example_file())
Example = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("tensorflow.Example"))


def _fill(feature: Any, value: Any, key: str, name: str) -> None:
    """Put ``value`` into ``feature`` as bytes_list, int64_list or float_list."""

    def refuse() -> SampleError:
        return SampleError(
            f"sample {key!r}, field {name!r}: TFRecord stores bytes, ints or floats "
            "(or lists or numpy "
            f"arrays of them), got {type(value).__name__}; encode the value first"
        )

    try:
        if isinstance(value, bytes | bytearray | memoryview):
            feature.bytes_list.value.append(bytes(value))
        elif isinstance(value, bool | int | np.integer | np.bool_):
            feature.int64_list.value.append(int(value))
        elif isinstance(value, float | np.floating):
            feature.float_list.value.append(float(value))
        elif isinstance(value, np.ndarray):
            if value.dtype.kind in "iub":
                feature.int64_list.value.extend(value.astype(np.int64, copy=False).ravel().tolist())
            elif value.dtype.kind == "f":
                feature.float_list.value.extend(value.ravel().tolist())
            else:
                raise refuse()
        elif isinstance(value, Sequence) and not isinstance(value, str):
            _fill_list(feature, value, refuse)
        else:
            raise refuse()
    except (ValueError, TypeError, OverflowError) as e:  # e.g. an int beyond int64
        raise SampleError(f"sample {key!r}, field {name!r}: {e}") from None


def _fill_list(feature: Any, values: Sequence[Any], refuse: Any) -> None:
    if all(isinstance(v, bytes | bytearray | memoryview) for v in values):
        feature.bytes_list.value.extend(bytes(v) for v in values)  # an empty list lands here too
    elif all(isinstance(v, bool | int | np.integer) for v in values):
        feature.int64_list.value.extend(int(v) for v in values)
    elif all(isinstance(v, int | float | np.integer | np.floating) for v in values):
        feature.float_list.value.extend(float(v) for v in values)
    else:
        raise refuse()


def encode_example(key: str, fields: dict[str, Any]) -> bytes:
    """Serialise one sample as a tf.train.Example; map entries sorted, so the bytes are
    deterministic."""
    example = Example()
    feature = example.features.feature
    feature[KEY].bytes_list.value.append(key.encode("utf-8", "surrogateescape"))
    for name, value in fields.items():
        _fill(feature[name], value, key, name)
    return example.SerializeToString(deterministic=True)


def decode_example(payload: bytes | memoryview) -> tuple[str | None, dict[str, Any]]:
    """(key or None, fields sorted by name) of a serialised tf.train.Example; DecodeError if it is
    not one."""
    example = Example.FromString(payload)
    key = None
    fields: dict[str, Any] = {}
    for name, feature in sorted(example.features.feature.items()):
        kind = feature.WhichOneof("kind")
        if kind == "int64_list":
            value: Any = np.array(feature.int64_list.value, dtype=np.int64)
        elif kind == "float_list":
            value = np.array(feature.float_list.value, dtype=np.float32)
        else:
            values = feature.bytes_list.value if kind == "bytes_list" else []
            value = values[0] if len(values) == 1 else list(values)
        if name == KEY and isinstance(value, bytes):
            key = value.decode("utf-8", "surrogateescape")
        else:
            fields[name] = value
    return key, fields


__all__ = ["DecodeError", "Example", "decode_example", "encode_example"]
