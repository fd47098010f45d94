"""The validate stage: each row checked against its columns' rules, each rule against its column."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from datapipe.builder.config_parts import TYPE_NAMES, ColumnRule
from datapipe.builder.dates import DATE_KINDS, is_date
from datapipe.builder.frame_columns import columns_of, is_missing
from datapipe.builder.quarantine import Reject, rejects_of
from datapipe.errors import ConfigError

INT_KINDS = tuple(t for t in TYPE_NAMES if "int" in t)


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    **{
        k: (lambda v: isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_))
        for k in INT_KINDS
    },
    "float32": lambda v: (
        isinstance(v, float | int | np.floating | np.integer) and not isinstance(v, bool)
    ),
    "float64": lambda v: (
        isinstance(v, float | int | np.floating | np.integer) and not isinstance(v, bool)
    ),
    "string": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool | np.bool_),
    "bytes": lambda v: isinstance(v, bytes | bytearray),
    **{kind: (lambda v, kind=kind: is_date(v, kind)) for kind in DATE_KINDS},
}


def _shown(bound: float | str) -> str:
    return bound if isinstance(bound, str) else f"{bound:g}"


def _rule_failure(col: str, rule: ColumnRule, value: Any) -> str | None:
    """Why ``value`` breaks ``rule``, or None."""
    if is_missing(value):
        return None if rule.nullable else f"{col}: missing value (nullable: false)"
    if isinstance(value, np.generic):
        value = value.item()
    if rule.type is not None and not _TYPE_CHECKS[rule.type](value):
        return f"{col}: expected {rule.type}, got {type(value).__name__} {value!r}"
    if rule.min is not None and not value >= rule.min:
        return f"{col}: {value!r} is below min {_shown(rule.min)}"
    if rule.max is not None and not value <= rule.max:
        return f"{col}: {value!r} is above max {_shown(rule.max)}"
    if rule.values is not None and value not in rule.values:
        return f"{col}: {value!r} is not one of {rule.values!r}"
    if rule.pattern is not None and not (
        isinstance(value, str) and re.fullmatch(rule.pattern, value)
    ):
        return f"{col}: {value!r} does not match pattern {rule.pattern!r}"
    if rule.min_length is not None and len(value) < rule.min_length:
        return f"{col}: length {len(value)} is below min_length {rule.min_length}"
    if rule.max_length is not None and len(value) > rule.max_length:
        return f"{col}: length {len(value)} is above max_length {rule.max_length}"
    return None


def _holds(series: pd.Series) -> str | None:
    """'numbers' or 'text' when every value of ``series`` is one (bools are neither); None when it
    is mixed or empty."""
    kind = series.dtype.kind
    if kind in "iuf":
        return "numbers"
    if kind in "OU" or isinstance(series.dtype, pd.StringDtype):
        values = series.dropna()
        if len(values) and all(isinstance(v, str) for v in values):
            return "text"
    return None


def _check_rule(series: pd.Series, rule: ColumnRule, where: str) -> None:
    """A ConfigError for a rule that cannot mean what it says of this column: a quoted bound on a
    column of numbers, a number on a column of text, ``values`` of the other kind."""
    holds, col = _holds(series), series.name
    if holds is None:
        return
    column = f"column {col!r} is {series.dtype}, {holds}"
    for key in ("min", "max"):
        bound = getattr(rule, key)
        if isinstance(bound, str):
            fix = (
                f"write {key}: {bound.strip()} without quotes"
                if _is_number(bound)
                else f"give {key} a number"
            )
            if holds == "text":
                fix = f"cast the column to a number first (cast: {{{col}: float64}}), then {fix}"
            raise ConfigError(f"{where}.{key}: {bound!r} is text, and {column}: {fix}")
        if bound is not None and holds == "text":
            raise ConfigError(
                f"{where}.{key}: {bound:g} is a number, but {column}; cast it to a number in a "
                f"stage before this one (cast: {{{col}: float64}})"
            )
    if rule.values and holds == "numbers" and all(isinstance(v, str) for v in rule.values):
        raise ConfigError(
            f"{where}.values: {rule.values!r} are text, but {column}; write them without quotes"
        )
    if rule.values and holds == "text" and all(_numeric(v) for v in rule.values):
        raise ConfigError(
            f"{where}.values: {rule.values!r} are numbers, but {column}; quote them, or cast the "
            "column to a number first"
        )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def validate(
    frame: pd.DataFrame, rules: dict[str, ColumnRule], label: str
) -> tuple[pd.DataFrame, list[Reject]]:
    """The rows that pass every rule of ``rules`` (column -> rule), and a reject for each other row
    with the first rule it breaks."""
    reasons: dict[Any, str] = {}
    for col, rule in rules.items():
        columns_of(frame, [col], f"{label}.{col}")
        _check_rule(frame[col], rule, f"{label}.{col}")
        for row, value in zip(frame.index, frame[col].array, strict=True):
            if row in reasons:
                continue
            try:
                why = _rule_failure(col, rule, value)
            except TypeError as e:  # e.g. min on a string
                why = f"{col}: {value!r} cannot be checked ({e})"
            if why is not None:
                reasons[row] = why
    return frame.drop(index=list(reasons)), rejects_of(frame, label, reasons)
