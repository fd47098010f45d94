"""Column types of a text source: inferred once from a fixed sample, then applied to every
partition.

Text readers parse every partition as strings (CSV) or Python objects (JSONL) and convert with
one schema, so that a value is typed the same way whichever partition it lands in: inferring
per partition would make a column int64 in one block and float64 in the next, and the bytes
of the shards would depend on the blocksize. A value the schema cannot hold sends its row to
quarantine with the column and the value named.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

# the schema sample: the first MiB of the first source file, whatever the blocksize
SAMPLE_BYTES = 1 << 20
SCHEMA_TYPES = ("int64", "float64", "bool", "string", "object")
_TRUE = {"true": True, "false": False, "True": True, "False": False, "TRUE": True, "FALSE": False}


@dataclass(frozen=True)
class SchemaSample:
    """Where a text source's inferred types came from: the file, the bytes of it read, the rows
    they held and the records set aside as malformed (they vote on no type)."""

    file: str
    bytes: int
    rows: int
    set_aside: int = 0


def infer_schema(sample: pd.DataFrame) -> dict[str, str]:
    """Column -> one of SCHEMA_TYPES, from a sample frame parsed with pandas' own inference."""
    schema = {}
    for col in sample.columns:
        series = sample[col]
        kind = series.dtype.kind
        if series.isna().all():
            schema[str(col)] = "string" if kind != "O" or series.empty else "object"
        elif kind in "iu":
            schema[str(col)] = "int64"
        elif kind == "f":
            schema[str(col)] = "float64"
        elif kind == "b":
            schema[str(col)] = "bool"
        else:
            values = series.dropna()
            schema[str(col)] = "string" if all(isinstance(v, str) for v in values) else "object"
    return schema


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, str):
        value = value.strip()
        try:
            number: Any = int(value)
        except ValueError:
            number = float(value)
    else:
        number = value
    if isinstance(number, float | np.floating):
        if not float(number).is_integer():
            raise ValueError
        number = int(number)
    if not -(2**63) <= int(number) < 2**63:
        raise ValueError
    return int(number)


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError
    number = float(value.strip() if isinstance(value, str) else value)
    if math.isnan(number):
        raise ValueError
    return number


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str) and value.strip() in _TRUE:
        return _TRUE[value.strip()]
    raise ValueError


def _to_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError
    return value


_CONVERTERS: dict[str, tuple[Callable[[Any], Any], str | None]] = {
    "int64": (_to_int, "Int64"),
    "float64": (_to_float, "float64"),
    "bool": (_to_bool, "boolean"),
    "string": (_to_str, None),
}


def _fast_numeric(series: pd.Series, kind: str) -> pd.Series | None:
    """Vectorised conversion of a numeric column when every value converts cleanly, else None."""
    if kind not in ("int64", "float64") or series.dtype.kind == "b":
        return None
    try:
        numbers = pd.to_numeric(series, errors="coerce")
    except (TypeError, ValueError):
        return None
    if (numbers.isna() & series.notna()).any() or numbers.dtype.kind not in "iuf":
        return None
    if kind == "float64":
        return numbers.astype("float64")
    if numbers.dtype.kind == "f":
        finite = numbers.dropna()
        if not (finite == np.floor(finite)).all() or (finite.abs() >= 2**63).any():
            return None
    try:
        return numbers.astype("Int64")
    except (TypeError, ValueError, OverflowError):
        return None


def apply_schema(
    frame: pd.DataFrame, schema: dict[str, str], *, strings: bool
) -> tuple[pd.DataFrame, pd.Series]:
    """Convert ``frame``'s columns to ``schema``; returns (frame, reason per bad row, indexed by row
    id).

    ``strings`` says the cells are CSV text, so a string column accepts anything; JSON cells
    must already be of the column's type (an int in a string column is a type error).
    """
    reasons: dict[Any, str] = {}
    out = {}
    for col in frame.columns:
        series = frame[col]
        kind = schema.get(str(col), "string" if strings else "object")
        if kind == "object" or (kind == "string" and strings):
            out[col] = series
            continue
        convert, dtype = _CONVERTERS[kind]
        fast = _fast_numeric(series, kind)
        if fast is not None:
            out[col] = fast
            continue
        values: list[Any] = []
        for row, value in zip(series.index, series.array, strict=True):
            if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
                values.append(None)
                continue
            try:
                values.append(convert(value))
            except (ValueError, TypeError, OverflowError):
                reasons.setdefault(
                    row,
                    f"column {col!r}: {_describe(value)} is not {kind} "
                    f"(set source.options.dtype.{col} to read it as another type)",
                )
                values.append(None)
        out[col] = pd.Series(values, index=series.index, dtype=dtype if dtype else object)
        if kind == "float64":
            out[col] = out[col].astype("float64")
    converted = pd.DataFrame(out, index=frame.index)
    return converted, pd.Series(reasons, dtype=object)
