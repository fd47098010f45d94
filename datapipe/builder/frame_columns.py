"""The columns a stage names, checked against its frame's: a misspelt name gets the near one."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from datapipe.errors import ConfigError, did_you_mean


def is_missing(value: Any) -> bool:
    """Whether ``value`` is a missing value (None, NA, NaT, NaN)."""
    return (
        value is None
        or value is pd.NA
        or value is pd.NaT
        or (isinstance(value, float) and math.isnan(value))
    )


def columns_of(frame: pd.DataFrame, columns: list[str] | None, label: str) -> list[str]:
    """``columns`` (every column when None), each a column of ``frame``; a ConfigError naming
    ``label``, the near name and the columns there are otherwise."""
    if columns is None:
        return list(frame.columns)
    unknown = [c for c in columns if c not in frame.columns]
    if unknown:
        raise ConfigError(
            f"{label}: no column {', '.join(map(repr, unknown))}"
            f"{did_you_mean(unknown, frame.columns)} "
            f"(columns: {', '.join(map(str, frame.columns))})"
        )
    return list(columns)
