"""Pillow decode of one image straight into its slot of a batch array: draft scale, one
crop-and-resize, flip."""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from datapipe.errors import SampleError
from datapipe.loader.images.boxes import Box, crop_box, uniforms
from datapipe.loader.images.spec import ImageSpec

SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N", "I")


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        from datapipe.errors import ConfigError

        raise ConfigError("datapipe.image needs Pillow: pip install pillow") from None
    return Image


def decode_images(
    spec: ImageSpec,
    keys: Sequence[str],
    payloads: Sequence[Any],
    out: np.ndarray,
    field: str = "image",
) -> np.ndarray:
    """Decode ``payloads`` (one per key) into ``out``, an array of shape (n, *spec.shape) and spec's
    dtype."""
    u = uniforms(keys, spec.seed, spec.epoch)
    for i, (key, payload) in enumerate(zip(keys, payloads, strict=True)):
        decode_into(spec, payload, u[i], out[i], key, field)
    return out


def decode_into(
    spec: ImageSpec,
    payload: Any,
    u: np.ndarray,
    slot: np.ndarray,
    key: str = "?",
    field: str = "image",
) -> None:
    """One image: opened, its box drawn from ``u``, decoded (at a draft scale for JPEG), cropped and
    resized to ``spec.size`` in one resample, flipped, and written into ``slot``."""
    image = _pillow()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", image.DecompressionBombWarning)
            with image.open(io.BytesIO(payload)) as img:
                width, height = img.size
                box = crop_box(spec, width, height, u)
                pixels = _resized(spec, img, box, image)
    except (
        OSError,
        SyntaxError,
        ValueError,
        image.DecompressionBombError,
        image.DecompressionBombWarning,
    ) as e:
        raise SampleError(
            f"field {field!r} of sample {key!r}: cannot decode the image "
            f"({type(e).__name__}: {e}); "
            "build with an `image` stage to quarantine such files"
        ) from None
    if box.flip:
        pixels = pixels[:, ::-1]
    target = slot if spec.layout == "HWC" else slot.transpose(1, 2, 0)
    if spec.dtype == "uint8":
        target[...] = pixels
    else:
        np.multiply(pixels, np.float32(1 / 255), out=target, casting="unsafe")


def _resized(spec: ImageSpec, img: Any, box: Box, image: Any) -> np.ndarray:
    """The box of ``img`` resized to spec.size, as an (H, W, 3) uint8 array."""
    out_h, out_w = spec.size
    width, height = img.size
    if spec.draft and img.format == "JPEG" and img.mode in ("RGB", "L", "YCbCr"):
        # the largest DCT reduction that leaves the box at least as big as the output
        reduce = min((box.right - box.left) / out_w, (box.bottom - box.top) / out_h)
        if reduce >= 2:
            img.draft(
                "RGB" if img.mode != "L" else "L",
                (math.ceil(width / reduce), math.ceil(height / reduce)),
            )
    img.load()
    fx, fy = img.size[0] / width, img.size[1] / height  # the draft's scale
    img = _rgb(img, image)
    scaled = (box.left * fx, box.top * fy, box.right * fx, box.bottom * fy)
    resized = img.resize((out_w, out_h), image.Resampling.BILINEAR, box=scaled)
    return np.asarray(resized)


def _rgb(img: Any, image: Any) -> Any:
    """Any mode as RGB: 16-bit grey to its top 8 bits, transparency laid on white (as the build's
    ``image`` stage re-encodes it), palette and CMYK converted."""
    if img.mode == "RGB":
        return img
    if img.mode in SIXTEEN_BIT:
        # 16-bit samples
        grey = (np.asarray(img).astype(np.uint32) >> 8).clip(0, 255).astype(np.uint8)
        return image.fromarray(grey, "L").convert("RGB")
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        white = image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return image.alpha_composite(white, rgba).convert("RGB")
    return img.convert("RGB")
