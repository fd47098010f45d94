"""Sample generators and comparisons shared by the tests."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
from hypothesis import strategies as st

from datapipe.formats.base import KEY

# Keys any format must hold: Unicode without '/', NUL or control characters (or surrogates).
_KEY_ALPHABET = st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/")


def keys(allow_dots: bool) -> st.SearchStrategy[str]:
    """Valid sample keys for a format (tar refuses dots)."""
    alphabet = _KEY_ALPHABET if allow_dots else st.characters(
        blacklist_categories=("Cc", "Cs"), blacklist_characters="/."
    )
    return st.text(alphabet, min_size=1, max_size=120)


field_names = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Lu", "Lt"), blacklist_characters="/"), min_size=1, max_size=12
).filter(lambda s: not s.startswith("__"))


def payload(size: int, seed: int) -> bytes:
    """Deterministic pseudo-random bytes."""
    return random.Random(seed).randbytes(size)


def plain(sample: dict[str, Any]) -> dict[str, Any]:
    """A sample with memoryviews turned into bytes and arrays into lists, for == comparisons."""
    out = {}
    for name, value in sample.items():
        if isinstance(value, memoryview):
            value = bytes(value)
        elif isinstance(value, np.ndarray):
            value = value.tolist()
        out[name] = value
    return out


def simple_samples(n: int, size: int = 100, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` samples with a class label and a payload of ``size`` bytes."""
    return [
        {KEY: f"sample{i:06d}", "cls": str(i % 10).encode(), "bin": payload(size, seed * 1_000_003 + i)}
        for i in range(n)
    ]
