"""One sample read by its byte range through the shard's index (never the whole shard), and its
fields made into what a page shows: text, pretty JSON, numbers, npy shape and dtype, images (only
what Pillow identifies)."""

from __future__ import annotations

import hashlib
import io
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.errors import NotFoundError, ShardCorruptError
from datapipe.formats.tokens.docs import DocumentTable
from datapipe.formats.tokens.megatron import MegatronIndex
from datapipe.formats.tokens.writer import DOCUMENTS, MEGATRON_INDEX
from datapipe.loader.dataset import Dataset
from datapipe.storage.fs import read_bytes
from datapipe.versioning.manifest import short_id

TAR_END = b"\0" * 1024  # the end-of-archive marker, so one sample's members read as a whole tar
SHOWN = 4096  # characters of a field shown before it is cut (the size of the rest is given)
PREVIEW = 160  # characters of a field in the grid
THUMB = 160  # thumbnail side, pixels
IMAGE_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg"}


@dataclass(frozen=True)
class Field:
    """A field as a page shows it: ``kind`` text, json, number, npy, image, binary or ids (a
    document's token ids); ``text`` what to print (cut to the limit asked, ``cut`` then True),
    ``size`` its stored bytes; a document's ``tokens``, and a ``note`` on how it is shown."""

    name: str
    kind: str
    text: str
    size: int
    cut: bool = False
    tokens: int | None = None
    note: str = ""


def locate(ds: Dataset, shard: int, row: int) -> tuple[int, int]:
    """Start and end byte of sample ``row`` of ``shard``, from its index; NotFoundError for a row it
    lacks."""
    index = ds.index(shard)
    if not 0 <= row < len(index):
        raise NotFoundError(
            f"shard {shard} of {ds.name}@{short_id(ds.version)} has no sample {row} ({len(index)})"
        )
    return int(index.sample_start[row]), int(index.sample_end[row])


def read_sample(ds: Dataset, shard: int, row: int) -> dict[str, Any]:
    """Sample ``row`` of ``shard``: its byte range alone, checked against the hash in the index."""
    start, end = locate(ds, shard, row)
    path = ds.shard_path(shard)
    try:
        data = ds.store.remote(path, lambda: ds.store.fs.cat_file(path, start=start, end=end))
    except FileNotFoundError:
        raise NotFoundError(
            f"{path}: shard {shard} of {ds.name}@{short_id(ds.version)} is missing"
        ) from None
    if hashlib.sha256(data).digest() != ds.index(shard).sample_hash[row].tobytes():
        raise ShardCorruptError(
            path,
            f"sample {row} does not match the hash in its index; check the store with "
            f"`datapipe verify {ds.store.url}/{ds.name}`",
            start,
        )
    if ds.format.name == "tokens":  # NAME.bin holds the ids alone
        return _document(ds, shard, row, data)
    if ds.format.name == "webdataset":
        data += TAR_END
    for entry in ds.format.reader(data, path).scan():
        return {k: bytes(v) if isinstance(v, memoryview) else v for k, v in entry.sample.items()}
    raise ShardCorruptError(path, f"sample {row} is empty", start)


def _document(ds: Dataset, shard: int, row: int, ids: bytes) -> dict[str, Any]:
    """Document ``row`` of token shard ``shard`` from its ids' bytes (read by range and checked)
    and the shard's Megatron index and documents table (its key and other fields)."""
    megatron, table = _TABLES.get(ds, shard)
    blob = memoryview(table.blob)
    sample: dict[str, Any] = {"__key__": table.key(row)}
    sample["tokens"] = np.frombuffer(ids, dtype=megatron.dtype.newbyteorder("<"))
    for name, start, end in table.values(row):
        sample[name] = bytes(blob[start:end])
    return sample


class _Tables:
    """The Megatron indexes and documents tables of the last ``size`` token shards read, each
    read whole: a few bytes a document beside its ids (which stay in ``NAME.bin``, read by range).
    Versions never change, so nothing kept goes stale."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._read: OrderedDict[tuple[str, str, str, int], tuple[MegatronIndex, DocumentTable]]
        self._read = OrderedDict()
        self._lock = threading.Lock()  # pages run on several threads

    def get(self, ds: Dataset, shard: int) -> tuple[MegatronIndex, DocumentTable]:
        """Shard ``shard``'s Megatron index and documents table."""
        key = (ds.store.url, ds.name, ds.version, shard)
        with self._lock:
            if key in self._read:
                self._read.move_to_end(key)
                return self._read[key]
        paths = ds.files.companion_paths(shard)
        data = {s: read_bytes(ds.store.fs, p, ds.store.retry) for s, p in paths.items()}
        read = (
            MegatronIndex.from_bytes(data[MEGATRON_INDEX], paths[MEGATRON_INDEX]),
            DocumentTable.from_bytes(data[DOCUMENTS], paths[DOCUMENTS]),
        )
        with self._lock:
            self._read[key] = read
            if len(self._read) > self.size:
                self._read.popitem(last=False)
        return read


_TABLES = _Tables()


def image_type(data: bytes) -> str | None:
    """The media type of a PNG or JPEG that Pillow identifies, else None (then it is shown as
    binary)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            return IMAGE_FORMATS.get(image.format or "")
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return None


def _cut(text: str, limit: int) -> tuple[str, bool]:
    return (text[:limit], True) if len(text) > limit else (text, False)


def describe(name: str, value: Any, kind: str | None, limit: int = SHOWN) -> Field:
    """How field ``name`` of kind ``kind`` (the manifest's, None when unknown) is shown, cut to
    ``limit``."""
    if not isinstance(value, bytes):
        return _text(
            name,
            "number" if isinstance(value, int | float) else "text",
            str(value),
            len(str(value)),
            limit,
        )
    size = len(value)
    if kind == "npy" or value.startswith(b"\x93NUMPY"):
        try:
            array = np.load(io.BytesIO(value), allow_pickle=False)
            return Field(name, "npy", f"{array.dtype} {list(array.shape)}", size)
        except (ValueError, OSError):
            pass
    if image_type(value) is not None:
        return Field(name, "image", "", size)
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return Field(name, "binary", f"binary, {size} bytes", size)
    if kind in ("int", "float"):
        return _text(name, "number", text, size, limit)
    if kind == "json" or text[:1] in "{[":
        try:
            return _text(
                name,
                "json",
                json.dumps(json.loads(text), indent=1, ensure_ascii=False),
                size,
                limit,
            )
        except ValueError:
            pass
    return _text(name, "text", text, size, limit)


def _text(name: str, kind: str, text: str, size: int, limit: int) -> Field:
    shown, cut = _cut(text, limit)
    return Field(name, kind, shown, size, cut)


class Thumbnails:
    """Thumbnails made on demand (PNG, at most THUMB pixels a side), the last ``size`` kept in
    memory."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._made: OrderedDict[tuple[str, str, int, int, str], bytes | None] = OrderedDict()
        # pages run on several threads; the thumbnail is made outside it
        self._lock = threading.Lock()

    def get(self, ds: Dataset, shard: int, row: int, field: str) -> bytes | None:
        """The thumbnail of ``field`` of a sample, or None when the field is not an image Pillow
        identifies."""
        key = (ds.name, ds.version, shard, row, field)
        with self._lock:
            if key in self._made:
                self._made.move_to_end(key)
                return self._made[key]
        value = read_sample(ds, shard, row).get(field)
        thumb = _thumbnail(value) if isinstance(value, bytes) and image_type(value) else None
        with self._lock:
            self._made[key] = thumb
            if len(self._made) > self.size:
                self._made.popitem(last=False)
        return thumb


def _thumbnail(data: bytes) -> bytes | None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.thumbnail((THUMB, THUMB))
            out = io.BytesIO()
            image.convert("RGBA" if "A" in image.getbands() else "RGB").save(out, "PNG")
            return out.getvalue()
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
