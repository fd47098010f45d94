"""Sample generators and comparisons shared by the tests."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
from hypothesis import strategies as st

from datapipe.formats.base import KEY
from datapipe.formats.registry import get_format
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store

# Keys any format must hold: Unicode without '/', NUL or control characters (or surrogates).
_KEY_ALPHABET = st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/")


def keys(allow_dots: bool) -> st.SearchStrategy[str]:
    """Valid sample keys for a format (tar refuses dots)."""
    alphabet = (
        _KEY_ALPHABET
        if allow_dots
        else st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/.")
    )
    return st.text(alphabet, min_size=1, max_size=120)


field_names = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Lu", "Lt"), blacklist_characters="/"),
    min_size=1,
    max_size=12,
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
        {
            KEY: f"sample{i:06d}",
            "cls": str(i % 10).encode(),
            "bin": payload(size, seed * 1_000_003 + i),
        }
        for i in range(n)
    ]


# A small committed dataset for loader tests ------------------------------------------------------

SIZES = [7, 13, 20, 5, 11, 9, 16]


def toy_sample(n: int) -> dict:
    return {
        "__key__": f"k{n:05d}",
        "cls": str(n % 10).encode(),
        "bin": bytes([n % 251]) * (n % 17 + 1),
    }


def make_dataset(root, sizes=SIZES, fmt="webdataset", name="toy") -> str:
    """A committed version with shards of the given sizes; returns its dataset URL."""
    store = Store(str(root))
    shard_format = get_format(fmt)
    writer = store.begin(name)
    shards, n = [], 0
    for i, size in enumerate(sizes):
        shards.append(writer.write_shard(i, [toy_sample(n + j) for j in range(size)], shard_format))
        n += size
    writer.commit(
        Manifest(
            name=name, shard_format=fmt, fields={"bin": "bytes", "cls": "int"}, shards=tuple(shards)
        )
    )
    return f"{root}/{name}"
