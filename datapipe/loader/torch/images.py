"""``datapipe.image(device="cuda")``: a batch's JPEGs decoded on the GPU
(torchvision.io.decode_jpeg), then each cropped, resized and flipped there with the same boxes as
the CPU path; and the check that a device is there."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from datapipe.errors import ConfigError
from datapipe.formats.base import KEY
from datapipe.loader.images.boxes import crop_box, uniforms
from datapipe.loader.images.spec import ImageSpec

JPEG_MAGIC = b"\xff\xd8"


def check_devices(specs: Mapping[str, ImageSpec]) -> None:
    """A ConfigError for a spec with device="cuda" where torch sees no CUDA device or torchvision is
    missing."""
    import torch

    for name, spec in specs.items():
        if spec.device != "cuda":
            continue
        if not torch.cuda.is_available():
            raise ConfigError(
                f"decode[{name!r}]: datapipe.image(device='cuda'): torch sees no CUDA "
                "device on this "
                "machine; use device='cpu' (the default) to decode in the DataLoader workers"
            )
        try:
            import torchvision.io  # noqa: F401
        except ImportError:
            raise ConfigError(
                f"decode[{name!r}]: datapipe.image(device='cuda') decodes with "
                "torchvision.io.decode_jpeg; install torchvision"
            ) from None


def on_gpu(batch: dict[str, Any], specs: Mapping[str, ImageSpec]) -> dict[str, Any]:
    """``batch`` with each field of ``specs`` (its payloads as bytes) replaced by its decoded CUDA
    tensor."""
    for name, spec in specs.items():
        batch[name] = decode_batch(spec, batch[KEY], batch[name], name)
    return batch


def decode_batch(
    spec: ImageSpec, keys: Sequence[str], payloads: Sequence[bytes], field: str = "image"
) -> Any:
    """(n, 3, H, W) (or (n, H, W, 3)) CUDA tensor of ``payloads``: JPEGs decoded on the GPU in one
    call, other formats by Pillow on the CPU and moved."""
    import torch

    n, (h, w) = len(payloads), spec.size
    u = uniforms(keys, spec.seed, spec.epoch)
    out = torch.empty((n, 3, h, w), dtype=torch.uint8, device="cuda")
    jpegs = [i for i, p in enumerate(payloads) if bytes(p[:2]) == JPEG_MAGIC]
    if jpegs:
        _jpegs_on_gpu(spec, payloads, jpegs, u, out)
    on_device = set(jpegs)
    others = [i for i in range(n) if i not in on_device]
    if others:  # PNG and the like: the CPU path, then one copy to the device
        _others_on_cpu(spec, keys, payloads, others, u, out, field)
    if spec.layout == "HWC":
        out = out.permute(0, 2, 3, 1).contiguous()
    return out.float().div_(255) if spec.dtype == "float32" else out


def _jpegs_on_gpu(
    spec: ImageSpec,
    payloads: Sequence[bytes],
    jpegs: list[int],
    u: Any,
    out: Any,
) -> None:
    """Decode ``payloads[jpegs]`` on the GPU in one call, and crop, resize and flip each into its
    row of ``out`` with the CPU path's boxes."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg
    from torchvision.transforms.v2 import functional as F

    h, w = spec.size
    decoded = decode_jpeg(
        [torch.frombuffer(bytearray(payloads[i]), dtype=torch.uint8) for i in jpegs],
        mode=ImageReadMode.RGB,
        device="cuda",
    )
    for i, image in zip(jpegs, decoded, strict=True):
        box = crop_box(spec, int(image.shape[2]), int(image.shape[1]), u[i])
        top, left = round(box.top), round(box.left)
        height, width = max(1, round(box.bottom) - top), max(1, round(box.right) - left)
        crop = F.resized_crop(image, top, left, height, width, [h, w], antialias=True)
        out[i] = crop.flip(-1) if box.flip else crop


def _others_on_cpu(
    spec: ImageSpec,
    keys: Sequence[str],
    payloads: Sequence[bytes],
    others: list[int],
    u: Any,
    out: Any,
    field: str,
) -> None:
    """Decode ``payloads[others]`` (not JPEG) with the CPU path into their rows of ``out``."""
    import torch

    from datapipe.loader.images.decode import decode_into

    h, w = spec.size
    cpu = np.empty((len(others), 3, h, w), dtype=np.uint8)
    chw = replace(spec, layout="CHW", dtype="uint8", device="cpu")
    for j, i in enumerate(others):
        decode_into(chw, payloads[i], u[i], cpu[j], keys[i], field)
    out[others] = torch.from_numpy(cpu).to("cuda")
