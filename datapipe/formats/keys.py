"""The rules for sample keys and field names that every shard format shares."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from datapipe.errors import SampleError

# Unicode categories Cc (controls, NUL included) and Cs (lone surrogates): the body of a character
# class.
_CONTROL = r"\x00-\x1f\x7f-\x9f\ud800-\udfff"
_BAD_CHARS = re.compile(f"[{_CONTROL}]")


def _bad_char(text: str) -> str | None:
    """The first NUL, control or lone-surrogate character of ``text`` (these cannot travel in a
    name)."""
    match = _BAD_CHARS.search(text)
    return match.group() if match else None


def refused_key_chars(*, allow_dots: bool) -> str:
    """A regular expression matching any character that ``check_key`` refuses in a key (for
    vectorised checks)."""
    return f"[/{_CONTROL}{'' if allow_dots else '.'}]"


def check_key(key: object, *, allow_dots: bool) -> str:
    """Validate a sample key: a non-empty str without '/', NUL or control characters.

    WebDataset readers split a member name at the first '.' of its basename, so the tar format
    passes ``allow_dots=False`` and a key with a dot is refused rather than silently split.
    """
    if not isinstance(key, str) or not key:
        raise SampleError(f"sample key must be a non-empty str, got {key!r}")
    if "/" in key:
        raise SampleError(f"sample key {key!r} contains '/'; keys name one sample, not a path")
    bad = _bad_char(key)
    if bad is not None:
        raise SampleError(f"sample key {key!r} contains the control character {bad!r}")
    if not allow_dots and "." in key:
        raise SampleError(
            f"sample key {key!r} contains '.', which WebDataset readers take as the "
            "start of the field "
            "name; replace the dots (e.g. with '_') in a map stage, or use the tfrecord format"
        )
    return key


def plain_keys(keys: Sequence[Any], *, allow_dots: bool) -> bool:
    """Whether every key passes ``check_key``, tested on all of them at once."""
    if not all(type(k) is str and k for k in keys):
        return False
    joined = "".join(keys)  # a bad character of any key is one of the whole
    return "/" not in joined and (allow_dots or "." not in joined) and _bad_char(joined) is None


def check_field(name: object, key: str) -> str:
    """Validate a field name (the tar extension): non-empty, no '/', NUL or control characters."""
    if not isinstance(name, str) or not name:
        raise SampleError(f"sample {key!r}: field names must be non-empty str, got {name!r}")
    if "/" in name or _bad_char(name) is not None or name.startswith("__"):
        raise SampleError(
            f"sample {key!r}: field name {name!r} is not allowed (no '/', control "
            "characters or leading '__')"
        )
    return name
