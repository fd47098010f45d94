"""The peers, written and read the way their documentation shows: WebDataset 1.0.2, MosaicML
Streaming, LitData.

Every reader touches every payload (its length and first byte) and returns ``(samples, payload
bytes, sum of first bytes)``. Shard/chunk targets are 64 MB throughout.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Sequence

from benchmarks.workloads import Data

SHARD_BYTES = 64 * 10**6
BATCH = 256
WORKERS = 2


def touch(payloads: Sequence) -> tuple[int, int, int]:
    """(count, bytes, sum of first bytes) of a list of bytes-like payloads."""
    nbytes = first = 0
    for p in payloads:
        nbytes += len(p)
        first += p[0]
    return len(payloads), nbytes, first


def add(total: list[int], part: tuple[int, int, int]) -> None:
    for i, v in enumerate(part):
        total[i] += v


def patch_torchvision() -> None:
    """Let ``import torchvision`` work with the CPU torch 2.13.0.

    mosaicml-streaming and litdata import torchvision; the torchvision wheel pip finds for
    torch==2.13.0 is a CUDA build whose C++ ops do not load with the CPU torch, and its
    ``_meta_registrations`` then fails with "operator torchvision::nms does not exist".
    Declaring the two op schemas it registers fake kernels for lets its pure-Python part import;
    nothing here calls a torchvision op.
    """
    import torch

    for op in ("nms", "qnms"):
        try:
            torch.library.define(
                f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
            )
        except RuntimeError:  # already defined (a working torchvision, or called twice)
            pass


# --- WebDataset -------------------------------------------------------------------------------


def wds_write(data: Data, out: str, int_mtime: bool = False) -> None:
    """ShardWriter with maxsize 64 MB; ``int_mtime`` passes ``mtime=0`` (an int) to every TarWriter.

    By default TarWriter stamps each member with ``time.time()``, a float, which tarfile's
    (default) PAX format stores in a 1 KiB extended header per member.
    """
    import webdataset as wds

    os.makedirs(out, exist_ok=True)
    kw = {"mtime": 0} if int_mtime else {}
    with wds.ShardWriter(
        os.path.join(out, "shard-%06d.tar"), maxcount=10**9, maxsize=SHARD_BYTES, verbose=0, **kw
    ) as sink:
        for sample in data.samples:
            sink.write(sample)


def _wds_dataset(path: str):
    import webdataset as wds

    urls = sorted(glob.glob(os.path.join(path, "*.tar")))
    return wds.WebDataset(urls, shardshuffle=False, empty_check=False)


def wds_read_one(path: str) -> list[int]:
    total = [0, 0, 0]
    for sample in _wds_dataset(path):
        b = sample["bin"]
        total[0] += 1
        total[1] += len(b)
        total[2] += b[0]
    return total


def wds_read_loader(path: str) -> list[int]:
    """WebDataset(...).batched(256) in a WebLoader (a DataLoader, batch_size=None) with 2
    workers."""
    import webdataset as wds

    loader = wds.WebLoader(_wds_dataset(path).batched(BATCH), batch_size=None, num_workers=WORKERS)
    total = [0, 0, 0]
    for batch in loader:
        add(total, touch(batch["bin"]))
    return total


# --- MosaicML Streaming -----------------------------------------------------------------------

MDS_COLUMNS = {"key": "str", "cls": "int", "bin": "bytes"}


def mds_write(data: Data, out: str) -> None:
    patch_torchvision()
    from streaming import MDSWriter

    with MDSWriter(
        out=out, columns=MDS_COLUMNS, size_limit=SHARD_BYTES, progress_bar=False
    ) as writer:
        for sample, label in zip(data.samples, data.labels, strict=True):
            writer.write({"key": sample["__key__"], "cls": label, "bin": sample["bin"]})


def _mds_dataset(path: str, batch_size: int | None = None):
    patch_torchvision()
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    return StreamingDataset(local=path, shuffle=False, batch_size=batch_size)


def mds_read_one(path: str) -> list[int]:
    total = [0, 0, 0]
    for sample in _mds_dataset(path, BATCH):
        b = sample["bin"]
        total[0] += 1
        total[1] += len(b)
        total[2] += b[0]
    return total


def mds_read_index(path: str) -> list[int]:
    """Random access, ``ds[i]`` for every i in order (no iterator threads)."""
    ds = _mds_dataset(path, BATCH)
    total = [0, 0, 0]
    for i in range(len(ds)):
        b = ds[i]["bin"]
        total[0] += 1
        total[1] += len(b)
        total[2] += b[0]
    return total


def mds_read_loader(path: str) -> list[int]:
    from streaming import StreamingDataLoader

    loader = StreamingDataLoader(_mds_dataset(path, BATCH), batch_size=BATCH, num_workers=WORKERS)
    total = [0, 0, 0]
    for batch in loader:
        add(total, touch(batch["bin"]))
    return total


# --- LitData ----------------------------------------------------------------------------------

_LITDATA_SAMPLES: Data | None = None  # reached by the forked optimize worker


def _litdata_item(i: int) -> dict:
    assert _LITDATA_SAMPLES is not None
    sample = _LITDATA_SAMPLES.samples[i]
    return {"key": sample["__key__"], "cls": _LITDATA_SAMPLES.labels[i], "bin": sample["bin"]}


def litdata_write(data: Data, out: str) -> None:
    """``optimize`` over the sample indices, one worker (forked, so it sees the samples in
    memory)."""
    global _LITDATA_SAMPLES
    patch_torchvision()
    from litdata import optimize

    _LITDATA_SAMPLES = data
    try:
        optimize(
            fn=_litdata_item,
            inputs=list(range(len(data.samples))),
            output_dir=out,
            chunk_bytes=SHARD_BYTES,
            num_workers=1,
            start_method="fork",
            verbose=False,
            mode="overwrite",
        )
    finally:
        _LITDATA_SAMPLES = None


def litdata_binary_write(data: Data, out: str) -> None:
    """LitData's ``BinaryWriter`` in this process (what ``optimize``'s worker calls)."""
    patch_torchvision()
    from litdata.streaming.writer import BinaryWriter

    writer = BinaryWriter(out, chunk_bytes=SHARD_BYTES)
    for i, (sample, label) in enumerate(zip(data.samples, data.labels, strict=True)):
        writer.add_item(i, {"key": sample["__key__"], "cls": label, "bin": sample["bin"]})
    writer.done()
    writer.merge()


def _litdata_dataset(path: str):
    patch_torchvision()
    from litdata import StreamingDataset

    return StreamingDataset(path, shuffle=False)


def litdata_read_one(path: str) -> list[int]:
    total = [0, 0, 0]
    for sample in _litdata_dataset(path):
        b = sample["bin"]
        total[0] += 1
        total[1] += len(b)
        total[2] += b[0]
    return total


def litdata_read_loader(path: str) -> list[int]:
    from litdata import StreamingDataLoader

    loader = StreamingDataLoader(_litdata_dataset(path), batch_size=BATCH, num_workers=WORKERS)
    total = [0, 0, 0]
    for batch in loader:
        add(total, touch(batch["bin"]))
    return total


# name -> (label, writer, {read mode: reader}); the writer's output directory is the reader's path
PEERS: dict[
    str, tuple[str, Callable[[Data, str], None] | None, dict[str, Callable[[str], list[int]]]]
] = {
    "wds": ("WebDataset", wds_write, {"one": wds_read_one, "loader": wds_read_loader}),
    "wds-int": (
        "WebDataset int mtime",
        lambda d, o: wds_write(d, o, int_mtime=True),
        {"one": wds_read_one, "loader": wds_read_loader},
    ),
    "mds": (
        "Mosaic MDS",
        mds_write,
        {"one": mds_read_one, "index": mds_read_index, "loader": mds_read_loader},
    ),
    "litdata": (
        "LitData optimize",
        litdata_write,
        {"one": litdata_read_one, "loader": litdata_read_loader},
    ),
    "litdata-bw": ("LitData BinaryWriter", litdata_binary_write, {}),
}


def import_all() -> None:
    """Import every peer (and datapipe's writer) now, so that no write timing includes an import."""
    patch_torchvision()
    import litdata  # noqa: F401
    import streaming  # noqa: F401
    import webdataset  # noqa: F401
    from litdata.streaming.writer import BinaryWriter  # noqa: F401

    import datapipe.versioning.store  # noqa: F401
