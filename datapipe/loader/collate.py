"""Batch collation: samples -> one dict of columns, numeric fields as numpy arrays built per batch.

How a field is decoded follows the kind the build recorded in the manifest (int, float, str, bytes,
npy, json), unless ``decode`` names another decoder for it: "int", "float", "str", "bytes", "json",
"npy", "image" (PNG/JPEG -> uint8 array, needs Pillow), "ragged" (all payloads of the batch in one
uint8 array, with int64 offsets: payload i is data[offsets[i]:offsets[i+1]]; two tensors per batch
instead of a bytes object per sample), or any callable taking the field's payload bytes, or
``datapipe.image(...)`` (loader/images/: each image decoded, cropped and resized straight into its
slot of one batch array).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from datapipe.errors import ConfigError, did_you_mean
from datapipe.formats.base import KEY
from datapipe.loader.columns import Allocate, Column, payload_bytes
from datapipe.loader.images.spec import ImageSpec

Decoder = str | Callable[[bytes], Any] | ImageSpec
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
    if (
        values
        and all(isinstance(v, np.ndarray) for v in values)
        and len({(v.shape, v.dtype) for v in values}) == 1
    ):
        return np.stack(values)
    return values


def _numbers(column: Column, dtype: type, array_dtype: type) -> np.ndarray:
    """ASCII numbers (tar) as ``dtype``, or one-element numeric lists (TFRecord) as ``array_dtype``:
    one array."""
    if np.dtype(dtype).kind == "f":
        values = column.decimals()  # vectorised and exact for plain decimals
        if values is not None:
            return values
    strings = column.strings()
    if strings is not None:  # one cast in C, with Python's int() and float() rules
        try:
            return strings.astype(dtype)
        except (ValueError, OverflowError):  # payload by payload below, to say what is wrong
            pass
    payloads = column.values()
    if payloads and isinstance(payloads[0], np.ndarray):
        if all(len(p) == 1 for p in payloads):
            return np.concatenate(payloads).astype(array_dtype, copy=False)
        return _stack([p.astype(array_dtype, copy=False) for p in payloads])
    parse = float if np.dtype(dtype).kind == "f" else int
    try:  # one number per payload, or a clear error (never a batch of another length)
        return np.array([parse(bytes(p)) for p in payloads], dtype=dtype)
    except (ValueError, OverflowError) as e:
        raise ConfigError(
            f"{e}: a payload is not one {np.dtype(dtype).name} number; decode the "
            "field with 'str' or 'bytes'"
        ) from None


def _npy_header(column: Column) -> tuple[int, np.dtype, tuple[int, ...]] | None:
    """(header length, dtype, shape) when every payload is a .npy of one C-order array kind (same
    header bytes)."""
    size = column.uniform_size()
    if size is None or size < 12:
        return None
    head = column.head(12)
    if head[:6] != b"\x93NUMPY" or head[6] not in (1, 2):
        return None
    length = (
        10 + int.from_bytes(head[8:10], "little")
        if head[6] == 1
        else 12 + int.from_bytes(head[8:12], "little")
    )
    if length > size:
        return None
    header = column.head(length)
    stream = io.BytesIO(header)
    try:
        version = np.lib.format.read_magic(stream)
        read = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, fortran_order, dtype = read(stream)
    except ValueError:
        return None
    if fortran_order or dtype.hasobject or size - length != dtype.itemsize * math.prod(shape):
        return None
    # the same dtype and shape in every sample: read once, compared per shard
    if not column.all_start_with(header):
        return None
    return length, dtype, shape


def _npy(column: Column, allocate: Allocate | None) -> Any:
    """Arrays of one dtype and shape: their data bytes gathered into one (n, *shape) array; else
    np.load each."""
    header = _npy_header(column)
    if header is not None:
        length, dtype, shape = header
        data = column.rows(length, dtype.itemsize * math.prod(shape), allocate)
        return data.view(dtype).reshape((column.n, *shape))
    return _stack([np.load(io.BytesIO(bytes(p)), allow_pickle=False) for p in column.values()])


class Ragged(NamedTuple):
    """A field whose payloads are not copied yet: ``batch_buffers.pack`` gathers them into its
    buffer, as a "ragged" field's data and offsets; for ``decoder`` "bytes", "str" or "json",
    ``decode_payloads`` makes the lists of the decoder again from them where the batch is unpacked
    (in the training process)."""

    column: Column
    decoder: str = "ragged"


class Images(NamedTuple):
    """An image field not decoded yet: ``batch_buffers.pack`` decodes it straight into its buffer
    (``into``)."""

    column: Column
    keys: list[str]
    spec: ImageSpec
    name: str

    @property
    def nbytes(self) -> int:
        """The bytes of the decoded batch array."""
        return self.column.n * math.prod(self.spec.shape) * self.spec.numpy_dtype.itemsize

    def into(self, buffer: np.ndarray) -> np.ndarray:
        """Decode into ``buffer`` (uint8, ``nbytes`` long); the batch array, a view of it."""
        from datapipe.loader.images.decode import decode_images

        out = (
            buffer[: self.nbytes]
            .view(self.spec.numpy_dtype)
            .reshape((self.column.n, *self.spec.shape))
        )
        return decode_images(self.spec, self.keys, self.column.values(), out, self.name)


def decode_images_field(
    column: Column,
    keys: list[str],
    spec: ImageSpec,
    name: str,
    defer: Collection[str],
    allocate: Allocate | None,
) -> Any:
    """An image field: ``Images`` to pack where the batch is packed (``defer``), else decoded into
    ``allocate``'s array now; with device="cuda", its payloads as bytes, decoded on the GPU in the
    training process."""
    if spec.device == "cuda":
        return decode_column(column, "bytes", defer, allocate)
    images = Images(column, keys, spec, name)
    if defer:
        return images
    return images.into(
        allocate(images.nbytes) if allocate is not None else np.empty(images.nbytes, np.uint8)
    )


# lists of one object per payload, which can travel as ragged bytes
PAYLOAD_DECODERS = ("bytes", "str", "json")


def decode_column(
    column: Column, decoder: Decoder, defer: Collection[str] = (), allocate: Allocate | None = None
) -> Any:
    """Decode one field of a batch, into ``allocate``'s array where it makes one; a field whose
    decoder is in ``defer`` ("ragged", or one of PAYLOAD_DECODERS over byte ranges) as ``Ragged``,
    to be packed."""
    if (
        isinstance(decoder, str)
        and decoder in defer
        and (decoder == "ragged" or column.spans_only())
    ):
        return Ragged(column, decoder)
    if decoder == "ragged":
        return column.ragged(allocate)
    if decoder == "int":
        labels = column.integers()  # vectorised for ASCII digits; else per payload below
        if labels is not None:
            return labels
    if decoder == "int":
        return _numbers(column, np.int64, np.int64)
    if decoder == "float":
        return _numbers(column, np.float64, np.float32)
    if decoder == "npy":
        return _npy(column, allocate)
    if decoder == "bytes":
        return column.bytes_list()
    payloads = column.values()
    if callable(decoder):
        return [decoder(bytes(p)) for p in payloads]
    if decoder == "str":
        return [str(p, "utf-8", "surrogateescape") for p in payloads]
    if decoder == "json":
        return [json.loads(bytes(p)) for p in payloads]
    # "image": decoders_for admits no other
    return _stack([_decode_image(bytes(p)) for p in payloads])


def decode_payloads(data: np.ndarray, offsets: np.ndarray, decoder: str) -> list[Any]:
    """The list a PAYLOAD_DECODERS decoder gives, from the payloads as ragged data and offsets: what
    the training process makes of a deferred field, the same values and types as
    ``decode_column``'s."""
    if decoder == "str":
        view, bounds = memoryview(data), offsets.tolist()
        return [
            str(view[a:b], "utf-8", "surrogateescape")
            for a, b in zip(bounds[:-1], bounds[1:], strict=False)
        ]
    payloads = payload_bytes(data, offsets)
    return [json.loads(p) for p in payloads] if decoder == "json" else payloads


def decoders_for(
    kinds: Mapping[str, str], fields: Sequence[str] | None, decode: Mapping[str, Decoder] | None
) -> dict[str, Decoder]:
    """Field -> decoder for the selected fields: the manifest's kind, overridden by ``decode``."""
    names = list(kinds) if fields is None else list(fields)
    unknown = [f for f in [*names, *(decode or {})] if f not in kinds]
    if unknown:
        raise ConfigError(
            f"no field {', '.join(map(repr, unknown))} in this dataset"
            f"{did_you_mean(unknown, kinds)} (fields: {', '.join(kinds)})"
        )
    out: dict[str, Decoder] = {}
    for name in names:
        decoder = (decode or {}).get(name, kinds[name].split("|")[0])
        if not isinstance(decoder, ImageSpec) and not callable(decoder) and decoder not in DECODERS:
            raise ConfigError(
                f"decode[{name!r}]: unknown decoder {decoder!r}; use one of {', '.join(DECODERS)}, "
                "datapipe.image(...) or a function of the payload bytes"
            )
        out[name] = decoder
    return out


def collate(
    keys: list[str],
    columns: Mapping[str, Column],
    decoders: Mapping[str, Decoder],
    defer: Collection[str] = (),
    allocate: Allocate | None = None,
) -> dict[str, Any]:
    """{'__key__': [str], field: array or list} from a batch's keys and per-field payloads.

    Fields whose decoder is in ``defer`` stay ``Ragged`` until packed (their bytes are copied once,
    into the packed buffer; see ``decode_column``).
    """
    batch: dict[str, Any] = {KEY: keys}
    for name, decoder in decoders.items():
        try:
            if isinstance(decoder, ImageSpec):
                batch[name] = decode_images_field(
                    columns[name], keys, decoder, name, defer, allocate
                )
                continue
            batch[name] = decode_column(columns[name], decoder, defer, allocate)
        except ConfigError as e:
            raise ConfigError(f"field {name!r}: {e}") from None
    return batch
