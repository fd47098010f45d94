"""The 'image' stage: each row's image opened with Pillow, checked, and re-encoded smaller where
asked.

A row is rejected (quarantined with the reason and its ``path``) when its bytes are missing or
empty, not an image Pillow reads, a decompression bomb (more pixels than ``max_pixels`` or Pillow's
``Image.MAX_IMAGE_PIXELS``, judged from the header before any pixel is decoded), smaller than
``min_side``, or corrupt or truncated (``verify: full`` decodes every pixel; ``verify: header`` only
runs Pillow's ``verify``, which checks PNG chunk checksums but decodes no JPEG data).

With ``resize``, an image whose longer side exceeds ``max_side``, or whose EXIF orientation is not
upright, is re-encoded: turned upright (``ImageOps.exif_transpose``), converted to RGB or L (see
``jpeg_ready``), scaled so its longer side is ``max_side`` (Lanczos, aspect kept) and saved as a
baseline JPEG at ``quality`` with 4:2:0 subsampling and no metadata (EXIF, ICC, comments), so the
same input and settings give the same bytes. Every other image keeps its bytes unchanged.
"""

from __future__ import annotations

import io
import math
import threading
import warnings
from typing import Any

import pandas as pd

from datapipe.builder.config_parts import ImageArgs
from datapipe.errors import ConfigError, did_you_mean

ORIENTATION = 0x0112  # the EXIF tag; 1 is upright
SIXTEEN_BIT = ("I", "I;16", "I;16B", "I;16L", "I;16N")  # 16-bit grey (PNG) opens as one of these


class _Rejected(Exception):
    """Why one image is quarantined."""


def _pillow(label: str) -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise ConfigError(
            f"{label}: the image stage needs Pillow, which is not installed where the build runs; "
            "install it with pip install 'datapipe[images]' (or pip install 'pillow>=10')"
        ) from None
    return Image


def pixel_limit(image_module: Any, max_pixels: int | None) -> int | None:
    """The most pixels an image may have: ``max_pixels`` or Pillow's limit, the lower; None when
    neither is set."""
    limits = [n for n in (max_pixels, image_module.MAX_IMAGE_PIXELS) if n]
    return min(limits) if limits else None


def check_images(
    frame: pd.DataFrame, args: ImageArgs, label: str
) -> tuple[pd.DataFrame, dict[Any, str]]:
    """The rows whose image passes (re-encoded where ``args.resize`` says), and row id -> reason for
    the rest."""
    image_module = _pillow(label)
    if args.column not in frame.columns:
        raise ConfigError(
            f"{label}.column: no column {args.column!r}"
            f"{did_you_mean([args.column], frame.columns)} (columns: "
            f"{', '.join(map(str, frame.columns))});"
            " name the column that holds the image bytes"
        )
    limit = pixel_limit(image_module, args.max_pixels)
    paths = frame["path"] if "path" in frame.columns else None
    reasons: dict[Any, str] = {}
    new: dict[Any, bytes] = {}
    for row, value in zip(frame.index, frame[args.column].array, strict=True):
        try:
            encoded = _check_one(image_module, value, args, limit)
        except _Rejected as e:
            where = f"{paths.loc[row]}: " if paths is not None else ""
            reasons[row] = f"{where}{e}"
            continue
        if encoded is not None:
            new[row] = encoded
    kept = frame.drop(index=list(reasons))
    if new:
        kept = kept.copy()
        kept[args.column] = pd.Series(
            [new.get(row, v) for row, v in zip(kept.index, kept[args.column].array, strict=True)],
            index=kept.index,
            dtype=object,
        )
    return kept, reasons


_WARNINGS = threading.Lock()


def _check_one(image_module: Any, value: Any, args: ImageArgs, limit: int | None) -> bytes | None:
    """None when the image passes as it is, its new bytes when it was re-encoded; _Rejected saying
    why not."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise _Rejected("no image: the column is empty")
    if not isinstance(value, bytes | bytearray | memoryview):
        raise _Rejected(f"expected image bytes, got {type(value).__name__}")
    data = bytes(value)
    if not data:
        raise _Rejected("empty file (0 bytes)")
    # the filters are process-wide: one thread at a time changes them
    with _WARNINGS, warnings.catch_warnings():
        # Pillow warns (and past twice its limit, raises) at open; both are a bomb, quarantined
        # undecoded
        warnings.simplefilter("error", image_module.DecompressionBombWarning)
        try:
            im = image_module.open(io.BytesIO(data))
        except (image_module.DecompressionBombError, image_module.DecompressionBombWarning) as e:
            raise _Rejected(f"decompression bomb, not decoded ({e})") from None
        except image_module.UnidentifiedImageError:
            raise _Rejected(
                "not an image Pillow can read (unsupported format, or a corrupt header)"
            ) from None
        except Exception as e:  # a broken header can raise nearly anything inside a decoder plugin
            raise _Rejected(f"corrupt image header ({type(e).__name__}: {e})") from None
    width, height = im.size
    if limit is not None and width * height > limit:
        raise _Rejected(
            f"decompression bomb, not decoded: {width}x{height} is {width * height} pixels, over "
            f"the limit of {limit} (max_pixels, or Pillow's Image.MAX_IMAGE_PIXELS)"
        )
    if min(width, height) < args.min_side:
        raise _Rejected(
            f"{im.format} image of {width}x{height} is smaller than min_side {args.min_side}"
        )
    try:
        if args.verify == "full":
            im.load()
        else:
            im.verify()
    # truncated or corrupt data: OSError, SyntaxError, ValueError... per plugin
    except Exception as e:
        raise _Rejected(
            f"corrupt or truncated {im.format} image ({type(e).__name__}: {e})"
        ) from None
    if args.resize is None:
        return None
    if args.verify != "full":  # verify() leaves the image unusable: open it again to decode
        im = image_module.open(io.BytesIO(data))
    orientation = im.getexif().get(ORIENTATION, 1)
    if max(width, height) <= args.resize.max_side and orientation == 1:
        return None
    try:
        return reencode(im, args.resize.max_side, args.resize.quality)
    except Exception as e:  # the decode of a header-verified image fails here
        raise _Rejected(
            f"corrupt or truncated {im.format} image ({type(e).__name__}: {e})"
        ) from None


def jpeg_ready(im: Any) -> Any:
    """``im`` in a mode JPEG holds: RGB and L stay; 16-bit grey is scaled to 8 bits (value / 256) as
    L; images with alpha (RGBA, LA, a palette with transparency) are laid on white; CMYK, palettes
    and the rest become RGB."""
    from PIL import Image

    if im.mode in ("RGB", "L"):
        return im
    if im.mode in SIXTEEN_BIT:
        return im.convert("I").point(lambda v: v * (1 / 256)).convert("L")
    if im.mode == "1":
        return im.convert("L")
    if im.mode == "P":
        im = im.convert("RGBA" if "transparency" in im.info else "RGB")
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        grey = im.mode in ("LA", "La")
        background = Image.new("RGBA", im.size, (255, 255, 255, 255))
        background.alpha_composite(im.convert("RGBA"))
        return background.convert("L" if grey else "RGB")
    return im.convert("RGB")


def reencode(im: Any, max_side: int, quality: int) -> bytes:
    """``im`` upright, in RGB or L, its longer side at most ``max_side`` (Lanczos), as JPEG bytes
    that depend only on its pixels and the settings."""
    from PIL import Image, ImageOps

    im = jpeg_ready(ImageOps.exif_transpose(im))
    width, height = im.size
    if max(width, height) > max_side:
        scale = max_side / max(width, height)
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        im = im.resize(size, Image.Resampling.LANCZOS)
    out = io.BytesIO()
    im.save(
        out, format="JPEG", quality=quality, subsampling="4:2:0", optimize=False, progressive=False
    )
    return out.getvalue()
