"""Turns cleaned rows into samples: the key, and each field's value encoded for the shard format.

Encoding, by the value's type (docs/guide/building.md, "Field encoding"):

    int, bool      tar: ASCII decimal (the .cls convention; bools as 0/1)   tfrecord: int64
    float          tar: ASCII, shortest round-trip repr                    tfrecord: float
    str            UTF-8                                                   tfrecord: bytes
    bytes          as is                                                   tfrecord: bytes
    numpy array    .npy bytes (dtype and shape kept)                       tfrecord: bytes (.npy)
    list, dict     JSON (UTF-8, compact)                                   tfrecord: bytes (JSON)

A field made of several columns is a JSON object of them. A missing value (None, NaN, NA) is
not encoded: the row is quarantined, because a sample with a silently absent field breaks
collation later.
"""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.errors import SampleError
from datapipe.formats.base import KEY
from datapipe.formats.keys import check_field, check_key, refused_key_chars

KINDS = ("int", "float", "str", "bytes", "npy", "json")


class MissingValue(SampleError):
    """A field's column holds no value for this row."""


def is_missing(value: Any) -> bool:
    """None, NaN, pandas NA/NaT: a value that is not there."""
    if value is None:
        return True
    if isinstance(value, float | np.floating):
        return math.isnan(value)
    # pandas.NA and NaT compare as missing without importing pandas here
    return type(value).__name__ in ("NAType", "NaTType")


def jsonable(value: Any) -> Any:
    """A JSON-ready copy of ``value``: numpy scalars and arrays become Python, bytes become base64,
    NA null."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, bytes | bytearray | memoryview):
        return "base64:" + base64.b64encode(bytes(value)).decode()
    if is_missing(value):
        return None
    if isinstance(value, str | int | float | bool):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _json(value: Any) -> bytes:
    return json.dumps(
        jsonable(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False
    ).encode()


def _json_columns(values: Mapping[str, Any]) -> bytes:
    """A ``json: [columns]`` field: missing values (None, NaN, NA) are null; an infinity, which
    JSON cannot hold, is a SampleError naming its column."""
    for col, value in values.items():
        if isinstance(value, float | np.floating) and math.isinf(value):
            raise SampleError(
                f"column {col!r} is {float(value)!r}, which JSON cannot hold (a missing value "
                "becomes null); replace it in a map stage, or drop the row with a filter"
            )
    return _json(values)


def _npy(array: np.ndarray) -> bytes:
    if array.dtype.hasobject:
        raise SampleError(
            "object arrays cannot be stored as .npy; convert them to a numeric dtype in a map stage"
        )
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def _array(value: Any) -> np.ndarray:
    """A field the shard format takes as a 1-D numpy array of integers (token ids)."""
    if is_missing(value):
        raise MissingValue("no value")
    if not (isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "iu"):
        raise SampleError(
            f"expected a 1-D numpy array of integer ids (the tokenize stage's column), "
            f"got {type(value).__name__}"
        )
    return value


def encode_value(value: Any, numeric: bool) -> tuple[Any, str]:
    """(payload, kind) of one value. ``numeric`` keeps ints and floats as numbers (TFRecord
    features)."""
    if is_missing(value):
        raise MissingValue("no value")
    if isinstance(value, bool | np.bool_):
        return (int(value), "int") if numeric else (b"1" if value else b"0", "int")
    if isinstance(value, int | np.integer):
        return (int(value), "int") if numeric else (str(int(value)).encode(), "int")
    if isinstance(value, float | np.floating):
        return (float(value), "float") if numeric else (repr(float(value)).encode(), "float")
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape"), "str"
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value), "bytes"
    if isinstance(value, np.ndarray):
        return _npy(value), "npy"
    if isinstance(value, Mapping | Sequence):
        return _json(value), "json"
    if hasattr(value, "isoformat"):  # timestamps, dates
        return value.isoformat().encode(), "str"
    raise SampleError(
        f"cannot encode a value of type {type(value).__name__}; convert it in a map stage"
    )


class SampleEncoder:
    """Builds samples from rows: ``fields`` maps a field name to a column or a list of columns."""

    def __init__(
        self,
        key_column: str,
        fields: Mapping[str, str | Sequence[str]],
        *,
        numeric: bool,
        allow_dots_in_keys: bool,
        arrays: tuple[str, ...] = (),
    ) -> None:
        self.key_column = key_column
        # fields whose numpy arrays the shard format takes as they are (token shards' ids)
        self.arrays = arrays
        self.fields = {
            name: (cols if isinstance(cols, str) else tuple(cols)) for name, cols in fields.items()
        }
        self.numeric = numeric
        self.allow_dots = allow_dots_in_keys

    @property
    def columns(self) -> list[str]:
        """Every column a sample reads, the key first."""
        cols = [self.key_column]
        for spec in self.fields.values():
            cols.extend([spec] if isinstance(spec, str) else spec)
        return list(dict.fromkeys(cols))

    def key_of(self, value: Any) -> str:
        """The sample key for a key-column value, checked by the shard format's rule."""
        if is_missing(value):
            raise MissingValue(f"key column {self.key_column!r} has no value")
        if isinstance(value, float | np.floating) and float(value).is_integer():
            value = int(value)
        key = value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)
        return check_key(key, allow_dots=self.allow_dots)

    def encode(self, row: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
        """(key, encoded fields, kind of each field) of one row; SampleError says which field
        failed."""
        key = self.key_of(row[self.key_column])
        encoded: dict[str, Any] = {}
        kinds: dict[str, str] = {}
        for name, spec in self.fields.items():
            check_field(name, key)
            try:
                if name in self.arrays:
                    encoded[name], kinds[name] = _array(row[spec]), "npy"
                elif isinstance(spec, str):
                    encoded[name], kinds[name] = encode_value(row[spec], self.numeric)
                else:
                    encoded[name], kinds[name] = _json_columns({c: row[c] for c in spec}), "json"
            except MissingValue:
                raise MissingValue(
                    f"field {name!r}: column {spec!r} has no value (add a dropna or fillna stage)"
                ) from None
            except (SampleError, ValueError, TypeError) as e:
                raise SampleError(f"field {name!r}: {e}") from None
        return key, encoded, kinds


# Column-wise encoding -----------------------------------------------------------------------------
# The same bytes as SampleEncoder.encode, computed per column with numpy and pandas where the
# column's dtype allows it; rows the fast path cannot vouch for go through ``encode`` one by one.


@dataclass
class EncodedRows:
    """A partition's samples, column-wise: row ids, keys, each field's payloads and kinds, and
    rejects."""

    rows: list[int]
    keys: list[str]
    fields: dict[str, list[Any]]
    kinds: dict[str, set[str]]
    rejects: dict[int, str]

    def samples(self) -> list[dict[str, Any]]:
        """The samples as dicts (fields sorted), for the shard writer."""
        names = sorted(self.fields)
        columns = [self.fields[n] for n in names]
        return [
            {KEY: key, **dict(zip(names, values, strict=True))}
            for key, *values in zip(self.keys, *columns, strict=True)
        ]


def _fast_keys(series: Any, allow_dots: bool) -> list[str] | None:
    """Keys of a column whose values are all plain strings or integers and all valid, else None."""
    import pandas as pd

    if series.dtype.kind in "iu":
        keys = series.astype(str)
    elif series.dtype.kind in "OT" or isinstance(series.dtype, pd.StringDtype):
        if series.isna().any() or not all(type(v) is str for v in series.tolist()):
            return None
        keys = series
    else:
        return None
    pattern = refused_key_chars(allow_dots=allow_dots)
    if keys.str.len().eq(0).any() or keys.str.contains(pattern, regex=True).any():
        return None
    return keys.tolist()


def _fast_payloads(series: Any, numeric: bool) -> tuple[list[Any], str] | None:
    """(payloads, kind) of a column that encodes in one vectorised step, else None."""
    if series.isna().any():
        return None
    kind = series.dtype.kind
    if kind in "iu" or str(series.dtype) in (
        "Int64",
        "Int32",
        "Int16",
        "Int8",
        "UInt8",
        "UInt16",
        "UInt32",
        "UInt64",
    ):
        values = series.to_numpy(dtype=np.int64 if kind != "u" else np.uint64)
        return (values.tolist() if numeric else values.astype("S").tolist()), "int"
    if kind == "f":
        values = series.to_numpy(dtype=np.float64).tolist()
        return (values if numeric else [repr(v).encode() for v in values]), "float"
    if kind == "O":
        values = series.tolist()
        types = {type(v) for v in values}
        if types == {bytes}:
            return values, "bytes"
        if types == {str}:
            return [v.encode("utf-8", "surrogateescape") for v in values], "str"
    return None


def encode_columns(encoder: SampleEncoder, frame: Any) -> EncodedRows:
    """Encode every row of ``frame`` (indexed by row id) column by column; exact per-row fallback
    where needed."""
    row_ids = frame.index.tolist()
    if not row_ids:
        return EncodedRows([], [], {name: [] for name in encoder.fields}, {}, {})
    fast_keys = _fast_keys(frame[encoder.key_column], encoder.allow_dots)
    fast: dict[str, tuple[list[Any], str]] = {}
    for name, spec in encoder.fields.items():
        if name in encoder.arrays:
            values = frame[spec].tolist()
            if all(type(v) is np.ndarray and v.ndim == 1 and v.dtype.kind in "iu" for v in values):
                fast[name] = values, "npy"
        elif isinstance(spec, str):
            result = _fast_payloads(frame[spec], encoder.numeric)
            if result is not None:
                fast[name] = result
    if fast_keys is not None and len(fast) == len(encoder.fields):
        for name in encoder.fields:
            check_field(name, fast_keys[0] if fast_keys else "")
        return EncodedRows(
            row_ids,
            fast_keys,
            {n: p for n, (p, _) in fast.items()},
            {n: {k} for n, (_, k) in fast.items()} if row_ids else {},
            {},
        )
    return _encode_rows_one_by_one(encoder, frame, row_ids)


def _encode_rows_one_by_one(encoder: SampleEncoder, frame: Any, row_ids: list[int]) -> EncodedRows:
    columns = encoder.columns
    out = EncodedRows([], [], {name: [] for name in encoder.fields}, {}, {})
    if not row_ids:
        return out
    for row, values in zip(
        row_ids, zip(*(frame[c].array for c in columns), strict=True), strict=True
    ):
        try:
            key, fields, kinds = encoder.encode(dict(zip(columns, values, strict=True)))
        except SampleError as e:
            out.rejects[row] = str(e)
            continue
        out.rows.append(row)
        out.keys.append(key)
        for name, payload in fields.items():
            out.fields[name].append(payload)
            out.kinds.setdefault(name, set()).add(kinds[name])
    return out
