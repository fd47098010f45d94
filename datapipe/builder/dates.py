"""The ``date`` and ``datetime`` types of ``cast`` and ``validate``: ISO 8601 text in, one
timezone rule.

A ``datetime`` is held in UTC: a value with an offset (``Z``, ``+02:00``) is converted to UTC, and
a value without one is taken to be UTC already, so a version never depends on the timezone of the
machine that built it. A ``date`` is a calendar day with no time and no timezone; a value with a
time of day is an error (cast it to ``datetime``). Samples hold both as ISO 8601 text
(``2024-01-31``, ``2024-01-31T09:30:00+00:00``).
"""

from __future__ import annotations

import datetime
import re
from typing import Any

import pandas as pd

DATE_KINDS = ("date", "datetime")
# the column dtype a cast gives: days as datetime.date objects, instants as UTC timestamps
DATE_DTYPES = {"date": object, "datetime": "datetime64[ns, UTC]"}
_ISO = re.compile(
    r"\d{4}-\d{2}-\d{2}"
    r"(?P<time>[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?"
    r"(?P<zone>Z|[+-]\d{2}:?\d{2})?"
)


def cast_date(value: Any, kind: str) -> Any:
    """``value`` as a ``date`` (datetime.date) or a ``datetime`` (a UTC pandas Timestamp);
    ValueError saying what an accepted value looks like."""
    if isinstance(value, datetime.datetime):  # pandas Timestamps too
        stamp = pd.Timestamp(value)
        if kind == "date":
            return _day_of(stamp, value)
        return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    if isinstance(value, datetime.date):
        return value if kind == "date" else pd.Timestamp(value).tz_localize("UTC")
    if not isinstance(value, str):
        raise ValueError(
            f"{value!r} is not ISO 8601 text such as '2024-01-31' or '2024-01-31T09:30:00Z'; "
            "convert numbers (epoch seconds) in a map stage"
        )
    text = value.strip()
    match = _ISO.fullmatch(text)
    if match is None:
        raise ValueError(f"{value!r} is not an ISO 8601 {kind} (e.g. '2024-01-31')")
    if kind == "date":
        if match.group("time") or match.group("zone"):
            raise ValueError(f"{value!r} has a time of day; cast it to datetime")
    try:
        if kind == "date":
            return datetime.date.fromisoformat(text)
        stamp = pd.Timestamp(text.replace(" ", "T", 1))
    except ValueError as e:
        raise ValueError(f"{value!r}: {e}") from None
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")


def _day_of(stamp: pd.Timestamp, value: Any) -> datetime.date:
    """The day of a timestamp that has no time of day (midnight, no offset)."""
    if stamp.tzinfo is not None or stamp != stamp.normalize():
        raise ValueError(f"{value!r} has a time of day or a timezone; cast it to datetime")
    return stamp.date()


def is_date(value: Any, kind: str) -> bool:
    """Whether ``value`` already is of ``kind`` (what ``validate``'s type checks)."""
    if kind == "datetime":
        return isinstance(value, datetime.datetime) and value.tzinfo is not None
    return isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
