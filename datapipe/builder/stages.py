"""The cleaning stages, each a function of one partition's frame: rows kept, rows dropped, rows
rejected.

Dropped rows are counted (dropna, filter, dedupe, a map that removes rows); rejected rows go to
the quarantine with a reason (cast; validate: builder/validate_stage.py; image:
builder/image_stage.py; near_dedupe: builder/near_dedupe/). ``dedupe`` and ``near_dedupe`` are
global: they need every partition's rows first, so here they only apply what the run computed in
an earlier pass (a keep-mask; a Removal, whose rows go to the quarantine).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from datapipe.builder.config import StageConfig
from datapipe.builder.config_parts import ColumnRule, ImageArgs, TokenizeArgs
from datapipe.builder.dates import DATE_DTYPES, DATE_KINDS, cast_date
from datapipe.builder.frame_columns import columns_of, is_missing
from datapipe.builder.image_stage import check_images
from datapipe.builder.map_failure import map_failed
from datapipe.builder.quarantine import Reject, rejects_of
from datapipe.builder.removals import Removal
from datapipe.builder.tokenize_stage import TokenizerFile, tokenize
from datapipe.builder.user_code import load_function
from datapipe.builder.validate_stage import validate
from datapipe.errors import BuildError, ConfigError, did_you_mean

_INT_RANGES = {
    f"{p}{b}": (
        0 if p == "uint" else -(2 ** (b - 1)),
        2**b - 1 if p == "uint" else 2 ** (b - 1) - 1,
    )
    for p in ("int", "uint")
    for b in (8, 16, 32, 64)
}


@dataclass
class StageOutcome:
    """What one stage did to one partition."""

    frame: pd.DataFrame
    dropped: int = 0
    rejected: list[Reject] = field(default_factory=list)


def dedupe_hashes(frame: pd.DataFrame, columns: list[str] | None, label: str) -> np.ndarray:
    """A 128-bit hash per row of the dedupe columns, as an (n, 2) uint64 array in row order."""
    cols = columns_of(frame, columns, f"{label}.columns")
    if not len(frame):
        return np.zeros((0, 2), dtype=np.uint64)
    part = frame[cols].astype(object).where(frame[cols].notna(), None)
    a = pd.util.hash_pandas_object(part, index=False, hash_key="datapipe-dedup-1").to_numpy()
    b = pd.util.hash_pandas_object(part, index=False, hash_key="datapipe-dedup-2").to_numpy()
    return np.stack([a, b], axis=1).astype(np.uint64)


def _dropna(frame: pd.DataFrame, args: Any, label: str) -> StageOutcome:
    kept = frame.dropna(subset=columns_of(frame, args.columns, f"{label}.columns"))
    return StageOutcome(kept, len(frame) - len(kept))


def _fillna(frame: pd.DataFrame, args: Any, label: str) -> StageOutcome:
    frame = frame.copy()
    for col, value in args.values.items():
        columns_of(frame, [col], f"{label}.values.{col}")
        try:
            frame[col] = frame[col].fillna(value)
        except (TypeError, ValueError) as e:
            raise ConfigError(
                f"{label}.values.{col}: cannot fill column {col!r} with {value!r} ({e})"
            ) from None
    return StageOutcome(frame)


_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
# a bare name (not an attribute, a call or a number's exponent) or a `quoted` column name
_NAME = re.compile(r"`([^`]+)`|(?<![\w.])([A-Za-z_]\w*)(?!\w)(?!\s*\()")
_NOT_COLUMNS = {"and", "or", "not", "in", "is", "True", "False", "None", "inf", "nan"}


def names_in(expr: str) -> list[str]:
    """The column names a filter expression uses (words outside its strings, `quoted` names too),
    for the message when one is not a column."""
    names = []
    for quoted, bare in _NAME.findall(_STRING.sub("''", expr)):
        name = quoted or bare
        if name not in _NOT_COLUMNS and not name.startswith("@") and name not in names:
            names.append(name)
    return names


def _filter(frame: pd.DataFrame, expr: str, label: str) -> StageOutcome:
    if not len(frame):
        return StageOutcome(frame)
    try:
        mask = frame.eval(expr)
    except Exception as e:  # pandas raises many kinds for a bad expression
        unknown = [n for n in names_in(expr) if n not in frame.columns]
        why = (
            f"no column {', '.join(map(repr, unknown))}{did_you_mean(unknown, frame.columns)}"
            if unknown
            else f"{type(e).__name__}: {e}"
        )
        raise ConfigError(
            f"{label}: cannot evaluate {expr!r}: {why} "
            f"(columns: {', '.join(map(str, frame.columns))})"
        ) from None
    if (
        not isinstance(mask, pd.Series)
        or mask.dtype.kind not in "bO"
        and str(mask.dtype) != "boolean"
    ):
        raise ConfigError(
            f"{label}: {expr!r} must give true or false per row, not "
            f"{getattr(mask, 'dtype', mask)!r}"
        )
    keep = mask.fillna(False).astype(bool)
    return StageOutcome(frame[keep], int((~keep).sum()))


def _cast_value(value: Any, kind: str) -> Any:
    if kind in DATE_KINDS:
        return cast_date(value, kind)
    if kind in _INT_RANGES:
        if isinstance(value, bool | np.bool_):
            raise ValueError("a bool is not an integer")
        number = (
            float(value)
            if isinstance(value, str) and not value.strip().lstrip("-").isdigit()
            else value
        )
        if isinstance(number, float | np.floating) and not float(number).is_integer():
            raise ValueError(f"{value!r} is not a whole number")
        integer = int(number)
        low, high = _INT_RANGES[kind]
        if not low <= integer <= high:
            raise ValueError(f"{value!r} is outside the range of {kind}")
        return integer
    if kind in ("float32", "float64"):
        return float(value)
    if kind == "bool":
        if isinstance(value, str):
            text = value.strip().lower()
            if text not in ("true", "false", "1", "0"):
                raise ValueError(f"{value!r} is not a bool")
            return text in ("true", "1")
        if value not in (0, 1):
            raise ValueError(f"{value!r} is not a bool")
        return bool(value)
    if kind == "bytes":
        return value.encode() if isinstance(value, str) else bytes(value)
    return value if isinstance(value, str) else str(value)


_DTYPES = {
    **{k: k.capitalize().replace("Uint", "UInt") for k in _INT_RANGES},
    "float32": "float32",
    "float64": "float64",
    "bool": "boolean",
    "string": object,
    "bytes": object,
    **DATE_DTYPES,
}


def _cast(frame: pd.DataFrame, casts: dict[str, str], label: str) -> StageOutcome:
    frame = frame.copy()
    reasons: dict[Any, str] = {}
    for col, kind in casts.items():
        columns_of(frame, [col], f"{label}.{col}")
        values = []
        for row, value in zip(frame.index, frame[col].array, strict=True):
            if is_missing(value):
                values.append(None)
                continue
            try:
                values.append(_cast_value(value, kind))
            except (ValueError, TypeError, OverflowError) as e:
                reasons.setdefault(row, f"column {col!r}: cannot cast to {kind}: {e}")
                values.append(None)
        series = pd.Series(values, index=frame.index, dtype=object)
        frame[col] = series.astype(_DTYPES[kind]) if kind not in ("string", "bytes") else series
    rejected = rejects_of(frame, label, reasons)
    return StageOutcome(frame.drop(index=list(reasons)), rejected=rejected)


def _map(
    frame: pd.DataFrame, spec: str, label: str, base_dir: str, sha256: str | None
) -> StageOutcome:
    fn = load_function(spec, base_dir, sha256)
    try:
        result = fn(frame.copy())
    except Exception as e:
        # the user's frames and record, not datapipe's and Dask's: the place to fix is theirs
        head = f"{label}: {spec} raised {type(e).__name__}: {e}"
        raise map_failed(e, fn, frame, head, base_dir) from None
    if not isinstance(result, pd.DataFrame):
        raise BuildError(
            f"{label}: {spec} must return a pandas DataFrame, not {type(result).__name__}"
        )
    if (
        len(result) > len(frame)
        or not result.index.isin(frame.index).all()
        or result.index.has_duplicates
    ):
        raise BuildError(
            f"{label}: {spec} must return a subset of its input rows with their index kept "
            "(it may drop rows and change columns, not add rows or reset the index)"
        )
    return StageOutcome(result, len(frame) - len(result))


def _validate(frame: pd.DataFrame, rules: dict[str, ColumnRule], label: str) -> StageOutcome:
    kept, rejected = validate(frame, rules, label)
    return StageOutcome(kept, rejected=rejected)


def _image(frame: pd.DataFrame, args: ImageArgs, label: str) -> StageOutcome:
    kept, reasons = check_images(frame, args, label)
    return StageOutcome(kept, rejected=rejects_of(frame, label, reasons))


def _tokenize(
    frame: pd.DataFrame, args: TokenizeArgs, label: str, file: TokenizerFile | None
) -> StageOutcome:
    if file is None:
        raise BuildError(f"{label}: the job carries no tokenizer for this stage")
    kept, dropped, reasons = tokenize(frame, args, label, file)
    return StageOutcome(kept, dropped, rejects_of(frame, label, reasons))


def _near_dedupe(frame: pd.DataFrame, label: str, removal: Any) -> StageOutcome:
    """A near_dedupe stage's removal applied: the removed rows quarantined with their reasons."""
    if not isinstance(removal, Removal) or len(removal.keep) != len(frame):
        raise BuildError(
            f"{label}: this partition gave other rows than in the earlier pass; the stages before "
            "a near_dedupe (map functions in particular) must be deterministic"
        )
    gone = frame.index[~removal.keep]
    return StageOutcome(
        frame[removal.keep],
        0,
        rejects_of(frame, label, dict(zip(gone, removal.reasons, strict=True))),
    )


def run_stage(
    stage: StageConfig,
    label: str,
    frame: pd.DataFrame,
    base_dir: str,
    keep: Any = None,
    code: Mapping[str, str] | None = None,
    tokenizer: TokenizerFile | None = None,
) -> StageOutcome:
    """Apply one stage to a partition.

    ``keep`` is the dedupe mask computed for this partition (a near_dedupe stage's Removal);
    ``code`` maps the modules of map stages to the sha256 of their file as recorded in the lineage;
    ``tokenizer`` is the tokenize stage's file, read where the build started
    (``tokenize_stage.read_tokenizer``).
    """
    kind, args = stage.kind, stage.args
    if kind == "tokenize":
        return _tokenize(frame, args, label, tokenizer)
    if kind == "near_dedupe":
        return _near_dedupe(frame, label, keep)
    if kind == "dedupe":
        if keep is None or len(keep) != len(frame):
            raise BuildError(
                f"{label}: this partition gave other rows than in the earlier pass; the "
                "stages before "
                "a dedupe (map functions in particular) must be deterministic"
            )
        return StageOutcome(frame[keep], int((~keep).sum()))
    if kind == "map":
        return _map(frame, args, label, base_dir, (code or {}).get(args.partition(":")[0]))
    handlers = {
        "dropna": _dropna,
        "fillna": _fillna,
        "filter": _filter,
        "cast": _cast,
        "validate": _validate,
        "image": _image,
    }
    return handlers[kind](frame, args, label)
