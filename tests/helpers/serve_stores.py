"""Stores for datapipe serve's tests, written with the library's own writer."""

import io
import json

import numpy as np
from PIL import Image

from datapipe.formats.registry import get_format
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store


def png(seed: int, size=(24, 16)) -> bytes:
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8), "RGB").save(
        out, "PNG"
    )
    return out.getvalue()


def npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def write(
    store: Store,
    name: str,
    samples: list[dict],
    fields: dict[str, str],
    per_shard: int = 8,
    fmt: str = "webdataset",
    stages=(),
    refs=("latest",),
    rejects=(),
) -> Manifest:
    """A version of ``name`` holding ``samples``; ``rejects``: (stage, reason, source, row, data)
    rows quarantined."""
    from datapipe.builder.quarantine import Reject, quarantine_bytes

    writer = store.begin(name)
    shard_format = get_format(fmt)
    shards = tuple(
        writer.write_shard(s, samples[at : at + per_shard], shard_format)
        for s, at in enumerate(range(0, len(samples), per_shard))
    )
    if rejects:
        data = quarantine_bytes(
            (Reject(stage, reason, 0, text), source, row, None)
            for stage, reason, source, row, text in rejects
        )
        with store.fs.open(f"{writer.partial}/rejected.parquet", "wb") as f:
            f.write(data)
    parent = store.read_ref(name, "latest")
    return writer.commit(
        Manifest(
            name=name,
            shard_format=fmt,
            fields=fields,
            shards=shards,
            stages=tuple(stages),
            parent=parent,
            rejected="rejected.parquet" if rejects else None,
            rejected_rows=len(rejects),
        ),
        refs=refs,
    )


def shapes(n: int, change: int = -1) -> list[dict]:
    return [
        {
            "__key__": f"shape{i:03d}",
            "png": png(i + (1000 if i == change else 0)),
            "cls": str(i % 3).encode(),
            "meta": json.dumps({"i": i, "name": f"s{i}"}).encode(),
            "vec": npy(np.arange(i % 5 + 1, dtype=np.float32)),
        }
        for i in range(n)
    ]


FIELDS = {"png": "bytes", "cls": "int", "meta": "json", "vec": "npy"}
# keys may not hold '/' (they name tar members), so the script tag stays open: worse, were it not
# escaped
SCRIPT_KEY = "<script>alert(1)"
SCRIPT_TEXT = "<script>alert(1)</script>"


def raw_get(app, target: str) -> tuple[int, dict[str, str], str]:
    """GET ``target`` sent as is (no client-side '..' folding), decoded into the ASGI scope as
    uvicorn does."""
    import asyncio
    from urllib.parse import unquote

    path, _, query = target.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": unquote(path),
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return (
        start["status"],
        {k.decode(): v.decode() for k, v in start["headers"]},
        body.decode("utf-8", "replace"),
    )
