"""``datapipe.image(...)``: what an image field of a batch becomes (size, crop, flip, layout, dtype,
device)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from datapipe.errors import ConfigError

CROPS = ("random-resized", "center", None)
LAYOUTS = ("CHW", "HWC")
DTYPES = ("uint8", "float32")
DEVICES = ("cpu", "cuda")
# torchvision's eval convention: resize the short side to 256, center crop 224
EVAL_RESIZE = 256 / 224


@dataclass(frozen=True)
class ImageSpec:
    """An image decoder; ``seed`` and ``epoch`` are bound by the loader (the augmentation is a
    function of them and of the sample key)."""

    size: tuple[int, int]  # (height, width) of every decoded image
    crop: str | None = "random-resized"
    flip: bool = True
    layout: str = "CHW"
    dtype: str = "uint8"
    resize: int | None = None  # "center": the short side before the crop (default size * 256 / 224)
    # "random-resized": torchvision's RandomResizedCrop defaults
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    device: str = "cpu"
    # JPEG: decode at the smallest DCT scale that still covers the crop at ``size``
    draft: bool = True
    seed: int = 0
    epoch: int = 0

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of one decoded image."""
        h, w = self.size
        return (3, h, w) if self.layout == "CHW" else (h, w, 3)

    @property
    def numpy_dtype(self) -> np.dtype:
        """The dtype of the decoded images."""
        return np.dtype(self.dtype)

    def short_side(self) -> float:
        """ "center": the short side the image is resized to before the crop."""
        return float(self.resize) if self.resize is not None else min(self.size) * EVAL_RESIZE

    def at(self, seed: int, epoch: int) -> ImageSpec:
        """This decoder for ``epoch`` of a loader seeded with ``seed``."""
        return replace(self, seed=int(seed), epoch=int(epoch))


def _pair(name: str, value: object, kind: type, low: float) -> tuple:
    pair = (
        (value, value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    )
    if (
        not isinstance(pair, (tuple, list))
        or len(pair) != 2
        or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > low for v in pair
        )
    ):
        raise ConfigError(
            f"datapipe.image({name}={value!r}): give one number or two, each above {low:g}"
        )
    return tuple(kind(v) for v in pair)


def image(
    size: int | tuple[int, int] = 224,
    crop: str | None = "random-resized",
    flip: bool = True,
    layout: str = "CHW",
    dtype: str = "uint8",
    *,
    resize: int | None = None,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    device: str = "cpu",
    draft: bool = True,
) -> ImageSpec:
    """A decoder for ``Loader(decode={FIELD: datapipe.image(...)})``: each image of a batch decoded
    straight into its slot of one (batch, 3, H, W) uint8 tensor (``layout="HWC"``: (batch, H, W,
    3); ``dtype="float32"``: values / 255).

    ``size``: the output side (or (height, width)). ``crop``: "random-resized" (torchvision's
    RandomResizedCrop: area fraction in ``scale``, aspect ratio in ``ratio``, 10 tries then a center
    crop), "center" (resize the short side to ``resize``, default size * 256 / 224, then crop the
    center) or None (the whole image resized to ``size``). ``flip``: a horizontal flip with
    probability 1/2. The crop box and the flip of a sample are a function of (the loader's seed, the
    epoch, the sample key) only: the same pixels under any world size, worker count or resume.
    ``draft``: JPEGs decode at the smallest DCT scale (1/2, 1/4, 1/8) whose pixels still cover the
    crop at ``size``. ``device="cuda"``: JPEG batches are decoded on the GPU in the training process
    (torchvision.io.decode_jpeg) and the batch is a CUDA tensor.
    """
    h, w = _pair("size", size, int, 0)
    if crop not in CROPS:
        raise ConfigError(f"datapipe.image(crop={crop!r}): use 'random-resized', 'center' or None")
    if layout not in LAYOUTS:
        raise ConfigError(f"datapipe.image(layout={layout!r}): use 'CHW' or 'HWC'")
    if dtype not in DTYPES:
        raise ConfigError(
            f"datapipe.image(dtype={dtype!r}): use 'uint8' or 'float32' (values / 255)"
        )
    if device not in DEVICES:
        raise ConfigError(f"datapipe.image(device={device!r}): use 'cpu' or 'cuda'")
    if resize is not None and (
        isinstance(resize, bool) or not isinstance(resize, int) or resize < min(h, w)
    ):
        raise ConfigError(
            f"datapipe.image(resize={resize!r}): the short side before a center crop, an int of at "
            f"least the crop's {min(h, w)}"
        )
    lo, hi = _pair("scale", scale, float, 0)
    if lo > hi or hi > 1:
        raise ConfigError(
            f"datapipe.image(scale={scale!r}): (low, high) area fractions with low <= high <= 1"
        )
    rlo, rhi = _pair("ratio", ratio, float, 0)
    if rlo > rhi:
        raise ConfigError(
            f"datapipe.image(ratio={ratio!r}): (low, high) aspect ratios with low <= high"
        )
    return ImageSpec(
        (h, w), crop, bool(flip), layout, dtype, resize, (lo, hi), (rlo, rhi), device, bool(draft)
    )
