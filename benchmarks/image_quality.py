"""The quality cost of decoding JPEGs at a DCT scale (``datapipe.image(draft=True)``), as PSNR
against a full decode.

``python -m benchmarks.image_quality DIR [--size 224] [--epochs 3]`` decodes every JPEG under DIR
with the train transform (random-resized crop to SIZE, boxes from seed 0 and each epoch) twice: at
the draft scale and in full, each followed by the same crop and resize, and prints how many decodes
used a reduced scale and the PSNR of those against the full decode (mean, 5th percentile, minimum).
The eval transform (short side to SIZE * 256 / 224, center crop) is measured the same way.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import datapipe
from datapipe.loader.images.boxes import crop_box, uniforms
from datapipe.loader.images.decode import decode_into


def jpegs(directory: str) -> list[str]:
    """Every .jpg/.jpeg under ``directory``, sorted."""
    return sorted(
        os.path.join(root, name)
        for root, _, names in os.walk(directory)
        for name in names
        if name.lower().endswith((".jpg", ".jpeg"))
    )


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two uint8 images, dB (inf when equal)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def measure(paths: list[str], spec: datapipe.loader.images.spec.ImageSpec, epochs: int) -> dict:
    """Reduced-scale decodes and their PSNR against the full decode, over ``epochs`` of boxes."""
    from PIL import Image

    full_spec = type(spec)(**{**spec.__dict__, "draft": False})
    keys = [os.path.basename(p) for p in paths]
    draft, full = np.empty(spec.shape, np.uint8), np.empty(spec.shape, np.uint8)
    scores, decodes = [], 0
    for epoch in range(epochs):
        u = uniforms(keys, 0, epoch)
        for i, path in enumerate(paths):
            with open(path, "rb") as f:
                data = f.read()
            with Image.open(path) as img:
                box = crop_box(spec, *img.size, u[i])
            decodes += 1
            reduce = min(
                (box.right - box.left) / spec.size[1], (box.bottom - box.top) / spec.size[0]
            )
            if reduce < 2:  # decoded in full either way
                continue
            decode_into(spec.at(0, epoch), data, u[i], draft)
            decode_into(full_spec.at(0, epoch), data, u[i], full)
            scores.append(psnr(draft, full))
    s = np.array(scores)
    finite = s[np.isfinite(s)]
    return {
        "decodes": decodes,
        "reduced": len(scores),
        "mean_db": float(finite.mean()) if len(finite) else float("inf"),
        "p5_db": float(np.percentile(s, 5)) if len(s) else float("inf"),
        "min_db": float(s.min()) if len(s) else float("inf"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    paths = jpegs(args.directory)
    for name, spec in (
        ("train", datapipe.image(args.size, crop="random-resized", flip=False)),
        ("eval", datapipe.image(args.size, crop="center", flip=False)),
    ):
        r = measure(paths, spec, args.epochs if name == "train" else 1)
        print(
            f"{name}: {r['reduced']:,} of {r['decodes']:,} decodes at a reduced DCT "
            "scale; PSNR against the full "
            f"decode: mean {r['mean_db']:.1f} dB, 5th percentile {r['p5_db']:.1f} "
            f"dB, min {r['min_db']:.1f} dB"
        )


if __name__ == "__main__":
    main()
