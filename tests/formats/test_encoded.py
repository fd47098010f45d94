"""Encoded sample blocks: column-wise encoders and block writes give exactly the bytes of
sample-by-sample writes."""

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datapipe.formats.base import KEY, ShardWriter
from datapipe.formats.encoded import in_output_order
from datapipe.formats.registry import get_format

FORMATS = ["webdataset", "tfrecord"]


def columns(
    n: int, seed: int, fmt: str, key_len: int = 8, uniform: bool = False
) -> tuple[list[str], dict[str, list]]:
    """Keys and three fields; ``uniform``: payloads of one size per field (the tar encoder's strided
    copy)."""
    rng = np.random.default_rng(seed)
    keys = [f"k{i:0{key_len}d}" for i in range(n)]
    if uniform:
        return keys, {
            "bin": [rng.bytes(1024) for _ in range(n)],
            "cls": [str(i % 10).encode() for i in range(n)],
        }
    fields = {
        "bin": [rng.bytes(int(rng.integers(0, 1500))) for _ in range(n)],
        "cls": [i % 10 for i in range(n)]
        if fmt == "tfrecord"
        else [str(i % 10).encode() for i in range(n)],
        "txt": [("é" * (i % 5)).encode() for i in range(n)],
    }
    return keys, fields


def written(fmt: str, items) -> tuple[bytes, bytes]:
    """(shard bytes, index bytes) of writing ``items`` (sample dicts and encoded blocks)."""
    out = io.BytesIO()
    writer = get_format(fmt).writer(out)
    for item in items:
        if isinstance(item, dict):
            writer.write(item)
        else:
            writer.write_encoded(item)
    return out.getvalue(), writer.finish().index.to_bytes()


def samples(keys, fields) -> list[dict]:
    return [{KEY: k, **{name: fields[name][i] for name in fields}} for i, k in enumerate(keys)]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "key_len,uniform",
    [(8, False), (120, False), (8, True)],
    ids=["ustar names", "pax names", "payloads of one size"],
)
def test_blocks_write_the_bytes_and_index_of_single_writes(fmt, key_len, uniform):
    keys, fields = columns(300, 1, fmt, key_len, uniform)
    writer = get_format(fmt).writer
    general = ShardWriter.encode_samples.__func__(writer, keys, fields)
    fast = writer.encode_samples(keys, fields)
    assert bytes(fast.data) == bytes(general.data) and (fast.hashes == general.hashes).all()
    split = [
        writer.encode_samples(keys[a:b], {n: v[a:b] for n, v in fields.items()})
        for a, b in ((0, 100), (100, 300))
    ]
    assert written(fmt, split) == written(fmt, samples(keys, fields))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(
                st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/."),
                min_size=1,
                max_size=110,
            ),
            st.binary(max_size=700),
        ),
        min_size=1,
        max_size=12,
        unique_by=lambda t: t[0],
    )
)
def test_tar_encoder_matches_the_writer_on_any_keys_and_payloads(items):
    keys = [k for k, _ in items]
    fields = {"a": [p for _, p in items], "b": [p[:3] for _, p in items]}
    block = get_format("webdataset").writer.encode_samples(keys, fields)
    assert written("webdataset", [block]) == written("webdataset", samples(keys, fields))


@pytest.mark.parametrize("fmt", FORMATS)
def test_pieces_go_into_the_shard_in_output_position_order(fmt):
    keys, fields = columns(90, 2, fmt)
    writer = get_format(fmt).writer
    order = np.random.default_rng(3).permutation(90)  # output position of each sample
    pieces = []
    # three partitions, interleaved in the output
    for part in (slice(0, 30), slice(30, 60), slice(60, 90)):
        rows = list(range(90))[part]
        pieces.append(
            (
                order[part],
                writer.encode_samples(
                    [keys[r] for r in rows], {n: [v[r] for r in rows] for n, v in fields.items()}
                ),
            )
        )
    by_position = [samples(keys, fields)[r] for r in np.argsort(order)]
    assert written(fmt, in_output_order(pieces)) == written(fmt, by_position)
    unshuffled = [
        (np.arange(a, b), writer.encode_samples(keys[a:b], {n: v[a:b] for n, v in fields.items()}))
        for a, b in ((60, 90), (0, 25), (25, 60))
    ]
    blocks = in_output_order(unshuffled)
    assert len(blocks) == 3 and written(fmt, blocks) == written(fmt, samples(keys, fields))


@pytest.mark.parametrize("fmt", FORMATS)
def test_write_many_is_write_one_by_one(fmt):
    keys, fields = columns(50, 4, fmt)
    items = samples(keys, fields)
    # another field set starts a new run
    items[20] = {k: v for k, v in items[20].items() if k != "txt"}
    block = get_format(fmt).writer.encode_samples(
        [f"z{i}" for i in range(3)], {n: v[:3] for n, v in fields.items()}
    )
    out = io.BytesIO()
    writer = get_format(fmt).writer(out)
    writer.write_many([*items[:30], block, *items[30:]], chunk=7)
    assert (out.getvalue(), writer.finish().index.to_bytes()) == written(
        fmt, [*items[:30], block, *items[30:]]
    )


def test_write_many_refuses_a_key_twice_and_bad_values():
    from datapipe.errors import SampleError

    writer = get_format("webdataset").writer(io.BytesIO())
    with pytest.raises(SampleError, match="twice"):
        writer.write_many([{KEY: "a", "x": b"1"}, {KEY: "b", "x": b"2"}, {KEY: "a", "x": b"3"}])
    with pytest.raises(SampleError, match="stores bytes"):
        get_format("webdataset").writer(io.BytesIO()).write_many([{KEY: "a", "x": 5}])
    # keys are checked a run at a time; the error still names the sample, and runs see the keys of
    # earlier runs
    items = [{KEY: f"k{i}", "x": b"1"} for i in range(7)]
    with pytest.raises(SampleError, match="'k5' appears twice"):
        get_format("webdataset").writer(io.BytesIO()).write_many([*items, items[5]], chunk=3)
    for bad, message in (
        ("k/3", "contains '/'"),
        ("k.3", "contains '.'"),
        ("k\x013", "control character"),
        ("", "non-empty str"),
        (None, "non-empty str"),
    ):
        with pytest.raises(SampleError, match=message):
            get_format("webdataset").writer(io.BytesIO()).write_many(
                [*items[:3], {KEY: bad, "x": b"1"}, *items[3:]]
            )
    with pytest.raises(SampleError, match=r"sample 'k0': field name '__x'"):
        get_format("webdataset").writer(io.BytesIO()).write_many([{KEY: "k0", "__x": b"1"}])
