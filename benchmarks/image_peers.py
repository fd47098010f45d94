"""W4 for the peers: each writes the same JPEG files with its own writer, and reads them through the
shared transforms.

Writers take the (path, label) list of ``benchmarks.images.jpeg_files`` and store each file's
bytes unchanged with its int label: WebDataset ``ShardWriter`` (int mtime, ``jpg`` + ``cls``),
Mosaic ``MDSWriter`` (``jpg``: bytes, ``cls``: int), LitData ``optimize`` (one worker, as for
W1/W2). Readers decode with Pillow and apply ``benchmarks.image_transforms`` (train or eval):
in one process, each library's dataset iterated and stacked 256 at a time; with 2 DataLoader
workers, each library's loader with batch 256 (the same settings as W1/W2's reads).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable

from benchmarks import image_transforms as tf
from benchmarks.peers import SHARD_BYTES, WORKERS, patch_torchvision

Files = list[tuple[str, int]]


def _key(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# --- WebDataset -------------------------------------------------------------------------------


def wds_write(files: Files, out: str) -> None:
    """ShardWriter, 64 MB shards, ``mtime=0`` (no PAX header per member)."""
    import webdataset as wds

    os.makedirs(out, exist_ok=True)
    with wds.ShardWriter(
        os.path.join(out, "shard-%06d.tar"), maxcount=10**9, maxsize=SHARD_BYTES, verbose=0, mtime=0
    ) as sink:
        for path, label in files:
            sink.write({"__key__": _key(path), "jpg": _bytes(path), "cls": label})


def _wds_pipeline(path: str, kind: str):
    """``WebDataset(urls).decode("pil")`` then the transform and 256-image batches (WebDataset's
    collation)."""
    import webdataset as wds

    urls = sorted(glob.glob(os.path.join(path, "*.tar")))
    apply = tf.transform(kind)
    return (
        wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        .decode("pil")
        .map(lambda s: (apply(s["jpg"]), s["cls"]))
        .batched(tf.BATCH)
    )


def wds_read(path: str, kind: str, workers: int) -> list[int]:
    import webdataset as wds

    pipeline = _wds_pipeline(path, kind)
    batches = (
        pipeline if workers == 0 else wds.WebLoader(pipeline, batch_size=None, num_workers=workers)
    )
    return tf.read_batches(b[0] for b in batches)


# --- MosaicML Streaming -----------------------------------------------------------------------


def mds_write(files: Files, out: str) -> None:
    patch_torchvision()
    from streaming import MDSWriter

    with MDSWriter(
        out=out, columns={"jpg": "bytes", "cls": "int"}, size_limit=SHARD_BYTES, progress_bar=False
    ) as writer:
        for path, label in files:
            writer.write({"jpg": _bytes(path), "cls": label})


def _mds_dataset(path: str, kind: str):
    """A StreamingDataset subclass whose ``__getitem__`` applies the transform (Mosaic's documented
    way)."""
    patch_torchvision()
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    class Transformed(StreamingDataset):
        def __getitem__(self, index: int):
            sample = super().__getitem__(index)
            return tf.SAMPLE[kind](sample["jpg"]), sample["cls"]

    clean_stale_shared_memory()
    return Transformed(local=path, shuffle=False, batch_size=tf.BATCH)


def mds_read(path: str, kind: str, workers: int) -> list[int]:
    from streaming import StreamingDataLoader

    ds = _mds_dataset(path, kind)
    if workers == 0:
        return tf.read_batches(tf.stacked(image for image, _ in ds))
    return tf.read_batches(
        b[0] for b in StreamingDataLoader(ds, batch_size=tf.BATCH, num_workers=workers)
    )


# --- LitData ----------------------------------------------------------------------------------


def _litdata_item(item: tuple[str, int]) -> dict:
    path, label = item
    return {"jpg": _bytes(path), "cls": label}


def litdata_write(files: Files, out: str) -> None:
    """``optimize`` over the (path, label) list, one worker: it reads each file's bytes."""
    patch_torchvision()
    from litdata import optimize

    optimize(
        fn=_litdata_item,
        inputs=list(files),
        output_dir=out,
        chunk_bytes=SHARD_BYTES,
        num_workers=1,
        start_method="fork",
        verbose=False,
        mode="overwrite",
    )


def _litdata_dataset(path: str, kind: str):
    """``StreamingDataset(dir, transform=...)``: LitData applies the transform to each item."""
    patch_torchvision()
    from litdata import StreamingDataset

    sample = tf.SAMPLE[kind]
    return StreamingDataset(
        path, shuffle=False, transform=lambda item: (sample(item["jpg"]), item["cls"])
    )


def litdata_read(path: str, kind: str, workers: int) -> list[int]:
    from litdata import StreamingDataLoader

    ds = _litdata_dataset(path, kind)
    if workers == 0:
        return tf.read_batches(tf.stacked(image for image, _ in ds))
    return tf.read_batches(
        b[0] for b in StreamingDataLoader(ds, batch_size=tf.BATCH, num_workers=workers)
    )


Reader = Callable[[str], list[int]]


def modes(read: Callable[[str, str, int], list[int]]) -> dict[str, Reader]:
    """{"train-one", "train-loader", "eval-one", "eval-loader"} -> reader of a path."""
    return {
        f"{kind}-{where}": (lambda path, k=kind, n=n: read(path, k, n))
        for kind in tf.KINDS
        for where, n in (("one", 0), ("loader", WORKERS))
    }


# tool -> (label, writer, {mode: reader}); the writer's output directory is the reader's path
IMAGE_PEERS: dict[str, tuple[str, Callable[[Files, str], None], dict[str, Reader]]] = {
    "wds-img": ("WebDataset", wds_write, modes(wds_read)),
    "mds-img": ("Mosaic MDS", mds_write, modes(mds_read)),
    "litdata-img": ("LitData", litdata_write, modes(litdata_read)),
}
