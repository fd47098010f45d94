"""Byte sizes as people write them (64MB, 512KiB, 1.5GB or a number of bytes) and as they are shown
(1.2 KB): for pipeline files and options, listings and pages alike."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

SIZE_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*([KkMmGgTt][Ii]?[Bb]|[Bb])?\s*$"
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE_FORMS = (
    "an integer number of bytes or a string like '64MB', '512KiB', '1.5GB', '100 MB' "
    "(KB/MB/GB/TB = powers of 1000, KiB/MiB/GiB/TiB = powers of 1024, B = bytes)"
)


def parse_size(value: Any) -> int:
    """A byte count from an int or a string like "64MB", "512KiB", "1.5GB", "100 MB"; ValueError
    otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"must be {_SIZE_FORMS}")
    if isinstance(value, str):
        if not re.match(SIZE_PATTERN, value):
            raise ValueError(f"not a size: use {_SIZE_FORMS}")
        number, unit = re.match(r"\s*([0-9.]+)\s*([A-Za-z]*)", value).groups()
        exact = Decimal(number) * _SIZE_UNITS[unit.lower()]
    else:
        exact = Decimal(value)
    if exact != exact.to_integral_value():
        raise ValueError(f"must be a whole number of bytes, use {_SIZE_FORMS}")
    if exact < 1:
        raise ValueError("must be at least 1 byte")
    return int(exact)


def format_size(n: float) -> str:
    """Bytes for people, in powers of 1000: 950 B, 1.2 KB, 3.4 MB."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""
