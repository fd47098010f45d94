"""W4 for datapipe: ``datapipe build`` of the class folders, and ``datapipe.Loader`` with
``datapipe.image`` decode.

The pipeline reads the folders with the ``files`` source (columns path, name, parent, bytes) and
a map stage (``key_and_label`` below) that makes the key from the file name and the label from
the folder (``c0`` .. ``c9``: sorted, so the index is the digit). With issue 18's class-folder
source, the switch is the source line alone (``SOURCE_CLASS_FOLDERS``): that source gives
``label`` itself, and the map stage then only adds the key.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from benchmarks import image_transforms as tf
from benchmarks.peers import WORKERS

if TYPE_CHECKING:  # pandas is for the build's workers; the reader does not import it
    import pandas as pd

NAME = "w4"
SOURCE_FILES = "source: {{path: {images}/*/*.jpg, format: files}}"
SOURCE_CLASS_FOLDERS = "source: {{path: {images}, format: class_folders}}"
PIPELINE = """\
name: {name}
{source}
stages:
  - map: benchmarks.image_ours:key_and_label
sample: {{key: key, fields: {{jpg: bytes, cls: label}}}}
shards: {{max_bytes: 64MB}}
"""


def key_and_label(frame: pd.DataFrame) -> pd.DataFrame:
    """The map stage: ``key`` = the file name without its extension (unique in W4); ``label`` from
    the class folder when the source does not give it (the ``files`` source)."""
    frame = frame.copy()
    frame["key"] = [os.path.splitext(name)[0] for name in frame["name"]]
    if "label" not in frame:
        frame["label"] = [int(parent[1:]) for parent in frame["parent"]]
    return frame.drop(
        columns=[c for c in ("path", "name", "parent", "class", "group") if c in frame]
    )


def prepare(images: str, directory: str, class_folders: bool = False) -> str:
    """Write the W4 pipeline file into ``directory``; returns its path."""
    os.makedirs(directory, exist_ok=True)
    source = (SOURCE_CLASS_FOLDERS if class_folders else SOURCE_FILES).format(
        images=os.path.abspath(images)
    )
    path = os.path.join(directory, f"{NAME}.yaml")
    with open(path, "w") as f:
        f.write(PIPELINE.format(name=NAME, source=source))
    return path


def url(store: str) -> str:
    """The dataset URL of the built store."""
    return f"{store}/{NAME}"


def image_spec(kind: str, device: str | None = None):
    """issue 18's decode contract: the train or eval ``datapipe.image``; ``device="cuda"`` decodes
    on the GPU."""
    import datapipe

    extra = {"device": device} if device else {}
    if kind == "train":
        return datapipe.image(
            size=tf.SIZE, crop="random-resized", flip=True, layout="CHW", dtype="uint8", **extra
        )
    return datapipe.image(
        size=tf.SIZE,
        crop="center",
        resize=tf.RESIZE,
        flip=False,
        layout="CHW",
        dtype="uint8",
        **extra,
    )


def read(store: str, kind: str, workers: int) -> list[int]:
    """``datapipe.Loader(url, batch_size=256, num_workers=N, shuffle=False, decode={"jpg":
    image_spec(kind)})``."""
    import datapipe

    loader = datapipe.Loader(
        url(store),
        batch_size=tf.BATCH,
        num_workers=workers,
        shuffle=False,
        decode={"jpg": image_spec(kind)},
    )
    return tf.read_batches(batch["jpg"] for batch in loader)


READERS = {
    f"{kind}-{where}": (lambda store, k=kind, n=n: read(store, k, n))
    for kind in tf.KINDS
    for where, n in (("one", 0), ("loader", WORKERS))
}
