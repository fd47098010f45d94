"""Batch collation: samples -> one dict of columns, numeric fields as numpy arrays built per batch.

How a field is decoded follows the kind the build recorded in the manifest (int, float, str,
bytes, npy, json), unless ``decode`` names another decoder for it: "int", "float", "str",
"bytes", "json", "npy", "image" (PNG/JPEG -> uint8 array, needs Pillow), "ragged" (all
payloads of the batch in one uint8 array, with int64 offsets: payload i is
data[offsets[i]:offsets[i+1]]; two tensors per batch instead of a bytes object per sample),
or any callable taking the field's payload bytes.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from datapipe.errors import ConfigError
from datapipe.formats.base import KEY
from datapipe.loader.columns import Allocate, Column

Decoder = str | Callable[[bytes], Any]
DECODERS = ("int", "float", "str", "bytes", "json", "npy", "image", "ragged")


def _decode_image(data: bytes) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError:
        raise ConfigError("decoding images needs Pillow: pip install pillow") from None
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image)


def _stack(values: list[Any]) -> Any:
    """One array when every value is an array of one shape, else the list."""
    if values and all(isinstance(v, np.ndarray) for v in values) and len({(v.shape, v.dtype) for v in values}) == 1:
        return np.stack(values)
    return values


def _numbers(payloads: Sequence[Any], dtype: type) -> np.ndarray:
    """ASCII numbers (tar) or one-element numeric lists (TFRecord) as one array."""
    if payloads and isinstance(payloads[0], np.ndarray):
        if all(len(p) == 1 for p in payloads):
            return np.concatenate(payloads).astype(dtype, copy=False)
        return _stack([p.astype(dtype, copy=False) for p in payloads])
    return np.array(b" ".join(payloads).split(), dtype=dtype)


class Ragged(NamedTuple):
    """A "ragged" field whose payloads are not copied yet: ``packing.pack`` gathers them into its buffer."""

    column: Column


def decode_column(column: Column, decoder: Decoder, defer: bool = False, allocate: Allocate | None = None) -> Any:
    """Decode one field of a batch (a ragged one only as ``Ragged`` with ``defer``, else into ``allocate``'s array)."""
    if decoder == "ragged":
        return Ragged(column) if defer else column.ragged(allocate)
    if decoder == "int":
        labels = column.integers()  # vectorised for ASCII digits; else per payload below
        if labels is not None:
            return labels
    payloads = column.values()
    if callable(decoder):
        return [decoder(bytes(p)) for p in payloads]
    if decoder == "int":
        return _numbers(payloads, np.int64)
    if decoder == "float":
        return _numbers(payloads, np.float32 if payloads and isinstance(payloads[0], np.ndarray) else np.float64)
    if decoder == "str":
        return [bytes(p).decode("utf-8", "surrogateescape") for p in payloads]
    if decoder == "json":
        return [json.loads(bytes(p)) for p in payloads]
    if decoder == "npy":
        return _stack([np.load(io.BytesIO(bytes(p)), allow_pickle=False) for p in payloads])
    if decoder == "image":
        return _stack([_decode_image(bytes(p)) for p in payloads])
    return [bytes(p) if not isinstance(p, np.ndarray) else p for p in payloads]


def decoders_for(kinds: Mapping[str, str], fields: Sequence[str] | None,
                 decode: Mapping[str, Decoder] | None) -> dict[str, Decoder]:
    """Field -> decoder for the selected fields: the manifest's kind, overridden by ``decode``."""
    names = list(kinds) if fields is None else list(fields)
    unknown = [f for f in [*names, *(decode or {})] if f not in kinds]
    if unknown:
        raise ConfigError(f"no field {', '.join(map(repr, unknown))} in this dataset (fields: {', '.join(kinds)})")
    out: dict[str, Decoder] = {}
    for name in names:
        decoder = (decode or {}).get(name, kinds[name].split("|")[0])
        if not callable(decoder) and decoder not in DECODERS:
            raise ConfigError(f"decode[{name!r}]: unknown decoder {decoder!r}; use one of {', '.join(DECODERS)} "
                              "or a function of the payload bytes")
        out[name] = decoder
    return out


def collate(keys: list[str], columns: Mapping[str, Column], decoders: Mapping[str, Decoder],
            defer: bool = False, allocate: Allocate | None = None) -> dict[str, Any]:
    """{'__key__': [str], field: array or list} from a batch's keys and per-field payloads.

    With ``defer``, ragged fields stay ``Ragged`` until packed (their bytes are copied once, into the packed buffer).
    """
    batch: dict[str, Any] = {KEY: keys}
    for name, decoder in decoders.items():
        batch[name] = decode_column(columns[name], decoder, defer, allocate)
    return batch
