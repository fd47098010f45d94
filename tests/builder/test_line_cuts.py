"""Text blocks cut at anchor lines: every byte in exactly one block, in order, whatever the
blocksize and the read size; and a shift before a cut leaves the blocks after it alone."""

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from datapipe.builder.source import base
from datapipe.builder.source.base import Part, block_bytes, line_cut

text = st.lists(st.binary(max_size=90).map(lambda b: b.replace(b"\n", b"x")), max_size=120).map(
    b"\n".join
)


def blocks(data: bytes, blocksize: int) -> list[bytes]:
    f = io.BytesIO(data)
    return [
        block_bytes(f, Part(i, 0, start, blocksize))
        for i, start in enumerate(range(0, len(data), blocksize))
    ]


@settings(max_examples=200, deadline=None)
@given(text, st.booleans(), st.integers(1, 800), st.sampled_from([1, 5, 64, 1 << 16]))
def test_blocks_hold_every_byte_once_in_order(data, newline_at_end, blocksize, chunk):
    data += b"\n" if newline_at_end else b""
    old = base._CHUNK
    base._CHUNK = chunk  # the cuts do not depend on how the file is read
    try:
        assert b"".join(blocks(data, blocksize)) == data
        cuts = [line_cut(io.BytesIO(data), x, blocksize // 2 + 1) for x in range(0, len(data), 7)]
    finally:
        base._CHUNK = old
    assert cuts == [
        line_cut(io.BytesIO(data), x, blocksize // 2 + 1) for x in range(0, len(data), 7)
    ]
    assert cuts == sorted(cuts)


def test_bytes_inserted_early_leave_the_later_blocks_as_they_were():
    lines = [f'{{"id": {i}, "text": "{"y" * (i * 37 % 80)}"}}'.encode() for i in range(4000)]
    before = blocks(b"\n".join(lines) + b"\n", 16_384)
    lines[100] += b" " * 33
    after = blocks(b"\n".join(lines) + b"\n", 16_384)
    assert len(before) > 10
    assert len(set(after) - set(before)) <= 2
