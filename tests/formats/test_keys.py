"""Key and field-name rules: the vectorisable pattern refuses exactly what check_key refuses."""

from __future__ import annotations

import re

import pytest

from datapipe.errors import SampleError
from datapipe.formats.keys import check_key, plain_keys, refused_key_chars


@pytest.mark.parametrize("allow_dots", [True, False])
def test_refused_key_chars_match_check_key_and_plain_keys(allow_dots):
    pattern = re.compile(refused_key_chars(allow_dots=allow_dots))
    for code in [*range(0x200), *range(0xD7F0, 0xE010), 0x10FFFF]:
        key = f"a{chr(code)}b"
        try:
            check_key(key, allow_dots=allow_dots)
            accepted = True
        except SampleError:
            accepted = False
        assert (
            accepted == (pattern.search(key) is None) == plain_keys([key], allow_dots=allow_dots)
        ), hex(code)
