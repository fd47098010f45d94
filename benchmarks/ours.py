"""datapipe, written through the versioned store and read through ``datapipe.Loader``.

Readers return ``(samples, payload bytes, sum of first bytes)`` like the peers'. Modes "one" and
"loader" read the ``bin`` field as the default decode gives it (a list of bytes per batch, what a
user who passes no ``decode`` gets); "one-ragged" and "loader-ragged" with ``decode={"bin":
"ragged"}`` (one uint8 tensor of the batch's payloads and int64 offsets).
"""

from __future__ import annotations

from benchmarks.peers import BATCH, SHARD_BYTES, WORKERS, add, touch
from benchmarks.workloads import Data

NAME = "bench"


def write(
    data: Data, out: str, fmt_name: str = "webdataset", shard_bytes: int = SHARD_BYTES
) -> None:
    """Write ~64 MB shards (``shard_bytes``) through the store's VersionWriter and commit one
    version.

    Every sample of a workload has the same size, so the samples per shard come from the
    exact encoded size of the first one (no per-sample size call, which ``datapipe build``'s
    planning pass makes and a user with uniform samples would not).
    """
    from datapipe.formats.registry import get_format
    from datapipe.versioning.manifest import Manifest
    from datapipe.versioning.store import Store

    fmt = get_format(fmt_name)
    first = data.samples[0]
    per_shard = max(
        1,
        shard_bytes
        // fmt.writer.sample_size(first["__key__"], {"bin": first["bin"], "cls": first["cls"]}),
    )
    writer = Store(out).begin(NAME)
    entries = [
        writer.write_shard(i, data.samples[start : start + per_shard], fmt)
        for i, start in enumerate(range(0, len(data.samples), per_shard))
    ]
    writer.commit(
        Manifest(
            name=NAME,
            shard_format=fmt.name,
            fields={"cls": "int", "bin": "bytes"},
            shards=tuple(entries),
        )
    )


def url(out: str) -> str:
    """The dataset URL of what ``write`` committed."""
    return f"{out}/{NAME}"


def shard_files(out: str) -> list[str]:
    """The shard files of the committed version (for the cat / memmap floors)."""
    from datapipe.versioning.store import open_dataset_url

    store, name, manifest = open_dataset_url(url(out))
    base = store.path(name, "versions", manifest.version)
    return [f"{base}/{s.path}" for s in manifest.shards]


def _touch_ragged(column) -> tuple[int, int, int]:
    values, offsets = column
    starts = offsets[:-1]
    return len(starts), int(offsets[-1] - offsets[0]), int(values[starts].sum())


def read(out: str, num_workers: int, ragged: bool = False) -> list[int]:
    """``datapipe.Loader(url, batch_size=256, num_workers=N, shuffle=False)``, every batch touched;
    with ``ragged``, ``decode={"bin": "ragged"}``."""
    import datapipe

    loader = datapipe.Loader(
        url(out),
        batch_size=BATCH,
        num_workers=num_workers,
        shuffle=False,
        decode={"bin": "ragged"} if ragged else None,
    )
    total = [0, 0, 0]
    for batch in loader:
        add(total, _touch_ragged(batch["bin"]) if ragged else touch(batch["bin"]))
    return total


READERS = {
    "one": lambda out: read(out, 0),
    "loader": lambda out: read(out, WORKERS),
    "one-ragged": lambda out: read(out, 0, True),
    "loader-ragged": lambda out: read(out, WORKERS, True),
}
