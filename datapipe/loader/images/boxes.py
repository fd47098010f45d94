"""Each sample's crop box and flip, as a function of (seed, epoch, sample key) alone.

A sample's random numbers come from a blake2b hash of its key, salted with the loader's seed and the
epoch, stretched by splitmix64: no generator state is carried from sample to sample, so the box of a
sample does not depend on which rank, worker or batch reads it, nor on where a run resumed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from datapipe.loader.images.spec import ImageSpec

TRIES = 10  # torchvision's RandomResizedCrop: ten draws of area and ratio, then a center crop
UNIFORMS = 2 * TRIES + 3  # the draws, the crop's position (2) and the flip
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class Box(NamedTuple):
    """A crop of the stored image, in its pixels (left, top, right, bottom), and whether to flip
    it."""

    left: float
    top: float
    right: float
    bottom: float
    flip: bool


def uniforms(keys: Sequence[str], seed: int, epoch: int) -> np.ndarray:
    """(n, UNIFORMS) floats in [0, 1): each row a function of (seed, epoch, key) only."""
    salt = f"{seed}:{epoch}".encode()
    roots = np.frombuffer(
        b"".join(
            hashlib.blake2b(k.encode("utf-8", "surrogateescape"), digest_size=8, key=salt).digest()
            for k in keys
        ),
        dtype="<u8",
    )
    with np.errstate(over="ignore"):
        z = roots[:, None] + _GOLDEN * np.arange(1, UNIFORMS + 1, dtype=np.uint64)[None, :]
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def crop_box(spec: ImageSpec, width: int, height: int, u: np.ndarray) -> Box:
    """The box of one sample of a ``width`` x ``height`` image, from its row ``u`` of
    ``uniforms``."""
    flip = bool(spec.flip and u[-1] < 0.5)
    if spec.crop is None:
        return Box(0.0, 0.0, float(width), float(height), flip)
    out_h, out_w = spec.size
    if spec.crop == "center":
        # resize the short side, then take the center
        scale = spec.short_side() / min(width, height)
        w, h = min(width, out_w / scale), min(height, out_h / scale)
        left, top = (width - w) / 2, (height - h) / 2
        return Box(left, top, left + w, top + h, flip)
    left, top, w, h = _random_resized(spec, width, height, u)
    return Box(float(left), float(top), float(left + w), float(top + h), flip)


def _random_resized(
    spec: ImageSpec, width: int, height: int, u: np.ndarray
) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params, with the sample's own numbers: (left, top, width,
    height)."""
    area = width * height
    lo, hi = math.log(spec.ratio[0]), math.log(spec.ratio[1])
    for t in range(TRIES):
        target = area * (spec.scale[0] + (spec.scale[1] - spec.scale[0]) * u[2 * t])
        aspect = math.exp(lo + (hi - lo) * u[2 * t + 1])
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return (
                int(u[2 * TRIES] * (width - w + 1)),
                int(u[2 * TRIES + 1] * (height - h + 1)),
                w,
                h,
            )
    in_ratio = width / height
    if in_ratio < spec.ratio[0]:
        w, h = width, round(width / spec.ratio[0])
    elif in_ratio > spec.ratio[1]:
        w, h = round(height * spec.ratio[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h
