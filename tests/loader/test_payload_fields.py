"""bytes, str and json fields: the same lists through DataLoader workers (sent as raw bytes) as in
process."""

import json
import weakref

import numpy as np
import pytest

import datapipe
from datapipe.formats.registry import get_format
from datapipe.loader.batch_buffers import pack, unpack
from datapipe.loader.collate import Ragged, decode_payloads
from datapipe.loader.columns import Column, payload_bytes, rows_as_bytes
from datapipe.loader.torch.tensors import tensor_view
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store

FIELDS = {"bin": "bytes", "fix": "bytes", "txt": "str", "meta": "json", "cls": "int"}


def sample(n: int) -> dict:
    rng = np.random.default_rng(n)
    fixed = bytearray(rng.bytes(700))
    if n % 3 == 0:
        fixed[-1] = 0  # numpy's fixed-width bytes drop trailing NULs: these must come back whole
    return {
        "__key__": f"s{n:04d}",
        "bin": rng.bytes(int(rng.integers(0, 1500))) + b"\x00" * (n % 2),
        "fix": bytes(fixed),
        "txt": f"sample {n} é".encode() + (b"\xff" if n % 5 == 0 else b""),
        "meta": json.dumps({"n": n, "tags": ["a"] * (n % 4)}).encode(),
        "cls": str(n % 10).encode(),
    }


def write(root, samples: list[dict], fields: dict[str, str] = FIELDS, per_shard: int = 70) -> str:
    writer = Store(str(root)).begin("payloads")
    fmt = get_format("webdataset")
    shards = tuple(
        writer.write_shard(s, samples[at : at + per_shard], fmt)
        for s, at in enumerate(range(0, len(samples), per_shard))
    )
    writer.commit(
        Manifest(name="payloads", shard_format="webdataset", fields=fields, shards=shards)
    )
    return f"{root}/payloads"


@pytest.fixture(scope="module")
def payloads(tmp_path_factory) -> str:
    return write(tmp_path_factory.mktemp("store"), [sample(n) for n in range(400)])


def plain(batch: dict) -> dict:
    return {k: v.tolist() if hasattr(v, "tolist") else v for k, v in batch.items()}


# packed batches under PIPE_LIMIT are pickled, others shared
@pytest.mark.parametrize("batch_size", [4, 100])
def test_the_same_batches_values_and_types_in_process_and_through_workers(payloads, batch_size):
    def batches(workers: int) -> list[dict]:
        return list(datapipe.Loader(payloads, batch_size=batch_size, num_workers=workers, seed=3))

    here, there = batches(0), batches(2)
    assert len(here) == len(there) == 400 // batch_size
    for a, b in zip(here, there, strict=True):
        assert plain(a) == plain(b)
        assert {k: type(v) for k, v in a.items()} == {k: type(v) for k, v in b.items()}
        for name, kind in (("bin", bytes), ("fix", bytes), ("txt", str), ("meta", dict)):
            assert all(type(v) is kind for v in b[name])
    expected = {s["__key__"]: s for s in map(sample, range(400))}
    for batch in there:
        for i, key in enumerate(batch["__key__"]):
            s = expected[key]
            assert batch["bin"][i] == s["bin"] and batch["fix"][i] == s["fix"]
            assert batch["txt"][i] == s["txt"].decode("utf-8", "surrogateescape")
            assert batch["meta"][i] == json.loads(s["meta"]) and batch["cls"][i] == int(s["cls"])


def test_nothing_of_an_unpacked_payload_batch_keeps_its_buffer_alive():
    """Releases frees a batch's segment once its buffer is gone: payload lists are copies, not
    views."""
    items = [sample(n) for n in range(12)]
    batch = {"__key__": [s["__key__"] for s in items]}
    for name in ("bin", "fix", "txt", "meta"):
        column = Column(len(items))
        blob = b"".join(s[name] for s in items)
        sizes = np.array([len(s[name]) for s in items], dtype=np.int64)
        column.add_spans(np.arange(len(items)), memoryview(blob), np.cumsum(sizes) - sizes, sizes)
        batch[name] = Ragged(column, FIELDS[name])
    buffer, layout = pack(batch)
    # nothing of the payloads pickled
    assert all(kind in ("payloads", "object") for _, kind, _ in layout)
    back = unpack(buffer, layout, tensor_view)
    alive = weakref.ref(buffer)
    del buffer
    assert alive() is None
    assert back["bin"] == [s["bin"] for s in items] and back["fix"] == [s["fix"] for s in items]
    assert back["meta"] == [json.loads(s["meta"]) for s in items]


@pytest.mark.parametrize(
    "rows", [np.zeros((0, 5)), np.zeros((3, 0)), np.array([[1, 0], [0, 2], [0, 0]])]
)
def test_rows_as_bytes_keeps_trailing_nuls(rows):
    rows = rows.astype(np.uint8)
    assert rows_as_bytes(rows) == [r.tobytes() for r in rows]


@pytest.mark.parametrize(
    "payloads", [[], [b""], [b"ab", b"c\x00", b"", b"\x00\x00\x00"], [b"xy\x00"] * 5]
)
def test_payload_bytes_and_decoded_lists_equal_the_plain_ones(payloads):
    # not at offset 0 of its buffer
    data = np.frombuffer(b"--" + b"".join(payloads), dtype=np.uint8)[2:]
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in payloads], dtype=np.int64)]).astype(
        np.int64
    )
    assert payload_bytes(data, offsets) == payloads
    assert decode_payloads(data, offsets, "str") == [
        p.decode("utf-8", "surrogateescape") for p in payloads
    ]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_payload_that_is_not_json_raises_the_same_error_in_process_and_through_workers(
    tmp_path, workers
):
    items = [sample(n) for n in range(40)]
    items[17]["meta"] = b"{not json"
    url = write(tmp_path, items, per_shard=20)
    with pytest.raises(json.JSONDecodeError):
        list(datapipe.Loader(url, batch_size=8, num_workers=workers, shuffle=False))
