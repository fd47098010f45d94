"""The train and eval transforms every peer's W4 reader shares, written once
(torchvision.transforms.v2 on PIL).

train: RandomResizedCrop(224) with torchvision's defaults (scale (0.08, 1), ratio (3/4, 4/3)),
RandomHorizontalFlip, PILToTensor; eval: Resize(256) of the short side, CenterCrop(224),
PILToTensor. Both give a uint8 CHW tensor per image; 256 of them are stacked into a batch.
The decode is Pillow's full decode, ``Image.open(...).convert("RGB")``, as WebDataset's
``.decode("pil")`` does. Readers return ``(images, bytes of the uint8 batches, sum of each
image's first pixel value)``.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable

from benchmarks.peers import patch_torchvision

SIZE = 224
RESIZE = 256
BATCH = 256
KINDS = ("train", "eval")

_TRANSFORMS: dict[str, Callable] = {}


def transform(kind: str) -> Callable:
    """The PIL image -> uint8 CHW tensor transform of ``kind`` ("train" or "eval")."""
    if kind not in _TRANSFORMS:
        patch_torchvision()
        from torchvision.transforms import v2

        steps = (
            [v2.RandomResizedCrop(SIZE, antialias=True), v2.RandomHorizontalFlip()]
            if kind == "train"
            else [v2.Resize(RESIZE, antialias=True), v2.CenterCrop(SIZE)]
        )
        _TRANSFORMS[kind] = v2.Compose([*steps, v2.PILToTensor()])
    return _TRANSFORMS[kind]


def decode(data: bytes):
    """Pillow's full decode of an encoded image, as RGB."""
    from PIL import Image

    return Image.open(io.BytesIO(data)).convert("RGB")


def train_sample(data: bytes):
    """JPEG bytes -> the train transform's uint8 CHW tensor."""
    return transform("train")(decode(data))


def eval_sample(data: bytes):
    """JPEG bytes -> the eval transform's uint8 CHW tensor."""
    return transform("eval")(decode(data))


SAMPLE = {"train": train_sample, "eval": eval_sample}


def touch(batch) -> tuple[int, int, int]:
    """(images, bytes, sum of first pixel values) of a uint8 (N, 3, 224, 224) batch."""
    return batch.shape[0], batch.numel() * batch.element_size(), int(batch[:, 0, 0, 0].sum())


def stacked(images: Iterable) -> Iterable:
    """Stack an iterable of CHW tensors into batches of 256 (the last one partial), as a DataLoader
    collates."""
    import torch

    pending = []
    for image in images:
        pending.append(image)
        if len(pending) == BATCH:
            yield torch.stack(pending)
            pending = []
    if pending:
        yield torch.stack(pending)


def read_batches(batches: Iterable) -> list[int]:
    """Touch every batch; the reader's result."""
    total = [0, 0, 0]
    for batch in batches:
        for i, v in enumerate(touch(batch)):
            total[i] += v
    return total


def pillow_floor(files: list[str]) -> list[int]:
    """The floor: Pillow's full decode of each file (``Image.open(path).convert("RGB")``), in this
    process."""
    from PIL import Image

    count = nbytes = first = 0
    for path in files:
        with Image.open(path) as img:
            rgb = img.convert("RGB")  # loads (decodes) the whole image
        count += 1
        nbytes += rgb.width * rgb.height * 3
        first += rgb.getpixel((0, 0))[0]
    return [count, nbytes, first]
