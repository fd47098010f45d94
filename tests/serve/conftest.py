"""Fixtures of the browser's tests: a friendly store and a hostile one, and a TestClient over
each."""

import pytest
from helpers.serve_stores import FIELDS, SCRIPT_KEY, SCRIPT_TEXT, png, shapes, write

from datapipe.builder.quarantine import Reject, quarantine_bytes
from datapipe.versioning.manifest import StageCounts
from datapipe.versioning.store import Store


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    """shapes: two versions (v2 adds 4 samples and changes one; tagged v1 and v2); numbers: one
    tfrecord version."""
    store = Store(str(tmp_path_factory.mktemp("serve") / "store"))
    stages = [StageCounts("clean", 25, 20, dropped=3, rejected=2), StageCounts("validate", 20, 20)]
    write(store, "shapes", shapes(20), FIELDS, stages=stages, refs=("latest", "v1"))
    rejects = [
        ("stages[0].clean", "cls is not a number", "raw/a.csv", 3, '{"cls": "x"}'),
        ("stages[0].clean", "meta is not JSON", "raw/a.csv", 9, '{"meta": "<b>{"}'),
        ("source", "unparseable line", "raw/b.csv", 2, "<script>alert(3)</script>"),
    ]
    write(
        store,
        "shapes",
        shapes(24, change=5),
        FIELDS,
        stages=stages,
        refs=("latest", "v2"),
        rejects=rejects,
    )
    write(
        store,
        "numbers",
        [
            {"__key__": f"n{i}", "x": str(i * 1.5).encode(), "txt": f"row {i}".encode()}
            for i in range(10)
        ],
        {"x": "float", "txt": "str"},
        per_shard=4,
        fmt="tfrecord",
    )
    write(
        store,
        "many",
        [{"__key__": f"m{i:03d}", "txt": f"text {i}".encode()} for i in range(100)],
        {"txt": "str"},
        per_shard=30,
    )
    failed = store.path("shapes", "rejected", "20261201T101500Z-0badf00d.parquet")
    store.fs.makedirs(store.path("shapes", "rejected"), exist_ok=True)
    with store.fs.open(failed, "wb") as f:  # as a build that failed past max_rejected leaves it
        f.write(
            quarantine_bytes(
                [
                    (
                        Reject("stages[0].validate", "x out of range", 0, '{"x": 99}'),
                        "raw/c.csv",
                        4,
                        5,
                    )
                ]
            )
        )
    return store


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Store:
    """evil: a script key, HTML in text, a 1 MB field, bytes that claim to be a PNG; broken: a
    corrupt shard."""
    store = Store(str(tmp_path_factory.mktemp("serve-hostile") / "store"))
    write(
        store,
        "evil",
        [
            {
                "__key__": SCRIPT_KEY,
                "txt": b"<img src=x onerror=alert(2)>" + SCRIPT_TEXT.encode(),
                "png": b"\x89PNG\r\n\x1a\nnot really",
            },
            {"__key__": "huge", "txt": b"A" * (1 << 20), "png": png(1)},
        ],
        {"txt": "str", "png": "bytes"},
    )
    m = write(store, "broken", shapes(8), FIELDS)
    shard = store.shard_file("broken", m.version, m.shards[0])
    with open(shard, "r+b") as f:  # a flipped byte inside the first sample's image
        f.seek(700)
        byte = f.read(1)
        f.seek(700)
        f.write(bytes([byte[0] ^ 0xFF]))
    return store


@pytest.fixture(scope="module")
def client(store):
    from starlette.testclient import TestClient

    from datapipe.serve import create_app

    with TestClient(create_app(store)) as c:
        yield c


@pytest.fixture(scope="module")
def hostile_client(hostile):
    from starlette.testclient import TestClient

    from datapipe.serve import create_app

    with TestClient(create_app(hostile), raise_server_exceptions=False) as c:
        yield c
