"""The split of a sample as a pure function of its ``by`` value: a salted hash mapped onto
cumulative fractions.

A value's split depends on the value, the fractions and the seed alone, never on row order or on
other rows, so a sample keeps its split in every later version of a dataset. Values are hashed by
their text, with the sample key's rule (``5``, ``5.0`` and ``"5"`` are the same value); a null
(None, NaN, NA) hashes as one marker that no text can equal, so all nulls share one split.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from datapipe.errors import ConfigError

# how far from 1 the fractions may sum (YAML decimals are not exact in binary)
FRACTION_TOLERANCE = 1e-9
NULL_MARKER = b"\xff"  # never valid UTF-8 alone: no text value hashes to it
_SALT = b"datapipe-splits-1:"
SPLIT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


class SplitsConfig(BaseModel):
    """Named splits of the samples (train, val, ...), a sample's chosen by its ``by`` value.

    A sample's split is a function of the salted hash of its ``by`` value alone, so it stays in that
    split in every later version of the dataset.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    fractions: dict[str, float] = Field(
        description=(
            "split name -> fraction of the samples; every fraction above 0, "
            "summing to 1. The splits take their "
            "intervals of [0, 1) in name order"
        ),
        json_schema_extra={
            "minProperties": 1,
            "propertyNames": {"pattern": SPLIT_PATTERN},
            "additionalProperties": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        },
    )
    by: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "the column (after the stages) whose value decides the split; rows "
            "with equal values share a split, "
            "nulls all go to one. Default: the sample key"
        ),
    )
    seed: int = Field(
        default=0, ge=0, lt=2**63, description="salt of the hash: another seed, another assignment"
    )

    @field_validator("fractions")
    @classmethod
    def _fractions(cls, value: dict[str, float]) -> dict[str, float]:
        for name in value:
            if not re.match(SPLIT_PATTERN, name):
                raise ValueError(
                    f"bad split name {name!r}: 1-64 letters, digits, '_' or '-', starting "
                    "with a letter or digit"
                )
        try:
            check_fractions(value, "fractions")
        except ConfigError as e:
            raise ValueError(
                str(e).removeprefix("fractions: ").removeprefix("fractions.")
            ) from None
        return value


def split_names(fractions: Mapping[str, float]) -> list[str]:
    """The splits in the order of their intervals of [0, 1): sorted by name, whatever order the YAML
    gives."""
    return sorted(fractions)


def check_fractions(fractions: Mapping[str, float], where: str = "splits.fractions") -> None:
    """ConfigError naming ``where`` unless there is a split, every fraction is > 0 and they sum to
    1."""
    if not fractions:
        raise ConfigError(f"{where}: no splits; give at least one, e.g. {{train: 0.9, val: 0.1}}")
    for name, fraction in fractions.items():
        if not isinstance(fraction, int | float) or isinstance(fraction, bool) or not fraction > 0:
            raise ConfigError(
                f"{where}.{name}: a fraction must be a number above 0, got {fraction!r}"
            )
    total = math.fsum(float(f) for f in fractions.values())
    if abs(total - 1) > FRACTION_TOLERANCE:
        raise ConfigError(
            f"{where}: the fractions sum to {total:.10g}, not 1; make them add up to 1"
        )


def value_text(value: Any) -> bytes:
    """The bytes hashed for one ``by`` value: its text as a sample key would have it, or
    NULL_MARKER."""
    if value is None:
        return NULL_MARKER
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return NULL_MARKER
        if value.is_integer():
            value = int(value)
    elif isinstance(value, bytes):
        return value
    elif not isinstance(value, str | int) and _is_na(value):
        return NULL_MARKER
    return str(value).encode("utf-8", "surrogateescape")


def _is_na(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # arrays, lists: a value, not a null
        return False


def split_hashes(values: Iterable[Any], seed: int) -> np.ndarray:
    """The 64-bit salted hash (blake2b) of each value's text, as uint64."""
    key = _SALT + str(int(seed)).encode()
    digests = b"".join(
        hashlib.blake2b(value_text(v), digest_size=8, key=key).digest() for v in values
    )
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


def split_points(hashes: np.ndarray) -> np.ndarray:
    """Hashes as points in [0, 1): their top 53 bits, exact in a float64."""
    return (np.asarray(hashes, dtype=np.uint64) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def assign_splits(
    values: Sequence[Any] | np.ndarray | Any, fractions: Mapping[str, float], seed: int = 0
) -> np.ndarray:
    """Per value, the number of its split in ``split_names(fractions)`` (int8).

    Split i takes the points of [0, 1) from the sum of the fractions before it (in name order) up
    to that sum plus its own; the last one reaches 1 whatever the rounding of the sum.
    """
    check_fractions(fractions)
    names = split_names(fractions)
    if len(names) > 127:
        raise ConfigError("splits.fractions: at most 127 splits")
    edges = np.cumsum([float(fractions[n]) for n in names])[:-1]
    points = split_points(
        split_hashes(values.tolist() if hasattr(values, "tolist") else values, seed)
    )
    return np.searchsorted(edges, points, side="right").astype(np.int8)
