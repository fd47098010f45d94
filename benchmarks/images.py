"""W4: ImageNet-like JPEGs in 10 class folders, made from scikit-learn's two sample photographs
(issue 18).

Each image is a function of (seed, index) alone (numpy PCG64 seeded with both), so the folder is the
same on every run and machine with the same Pillow (libjpeg-turbo), however many processes make it:
a random crop of china.jpg or flower.jpg (a fifth to all of its area, aspect 4:3 or 3:4), a
horizontal flip half the time, a resize to a long side of 440-560 pixels, film grain (Gaussian
noise, sigma 5-11, mostly luminance: the sample photos are smoother than ImageNet's and would
otherwise compress to half its size) and a JPEG quality of 90-98. Written once: DIR.json (next to
the folder, not in it: a source of DIR sees only images) records the spec and the stats, and a
folder whose spec matches is reused.
"""

from __future__ import annotations

import io
import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context

import numpy as np

FORMAT = 1  # bump when make_image changes, so an old folder is remade


@dataclass(frozen=True)
class ImageWorkload:
    """``images`` JPEGs in ``classes`` folders ``c0`` .. ``c9``, labels drawn with ``seed``."""

    name: str
    images: int
    classes: int = 10
    seed: int = 4

    def describe(self) -> str:
        """One line for the log and the table."""
        return (
            f"{self.name}: {self.images:,} ImageNet-like JPEGs (~500x375, ~110 KB) "
            f"in {self.classes} class "
            f"folders; train and eval transforms to uint8 CHW batches of 256"
        )


def image_workload(quick: bool) -> ImageWorkload:
    """W4 at full size (20,000 images) or a tenth of it with ``quick``."""
    return ImageWorkload("w4", 2_000 if quick else 20_000)


_SOURCES: list | None = None


def _sources() -> list:
    global _SOURCES
    if _SOURCES is None:
        from PIL import Image
        from sklearn.datasets import load_sample_images

        # china, flower: 640x427 RGB
        _SOURCES = [Image.fromarray(a) for a in load_sample_images().images]
    return _SOURCES


def make_image(seed: int, index: int) -> bytes:
    """The JPEG bytes of image ``index``."""
    from PIL import Image

    rng = np.random.default_rng([seed, index])
    src = _sources()[int(rng.integers(0, 2))]
    portrait = rng.random() < 0.2
    aspect = 3 / 4 if portrait else 4 / 3  # width / height of the crop and of the output
    area = rng.uniform(0.2, 1.0) * src.width * src.height
    ch = min(src.height, int(np.sqrt(area / aspect)))
    cw = min(src.width, int(ch * aspect))
    ch = int(cw / aspect)
    x, y = int(rng.integers(0, src.width - cw + 1)), int(rng.integers(0, src.height - ch + 1))
    long_side = int(rng.integers(440, 561))
    size = (int(long_side * 3 / 4), long_side) if portrait else (long_side, int(long_side * 3 / 4))
    img = src.crop((x, y, x + cw, y + ch)).resize(size, Image.BICUBIC)
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    pixels = np.asarray(img, dtype=np.float32)
    sigma = rng.uniform(5, 11)
    luma = rng.normal(0, sigma, pixels.shape[:2] + (1,))
    chroma = rng.normal(0, sigma / 3, pixels.shape)
    pixels = np.clip(pixels + luma + chroma, 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=int(rng.integers(90, 99)))
    return out.getvalue()


def labels(w: ImageWorkload) -> np.ndarray:
    """The class of every image index."""
    return np.random.default_rng(w.seed).integers(0, w.classes, w.images)


def image_path(directory: str, label: int, index: int) -> str:
    """DIR/c<label>/<index>.jpg (the index zero-padded, unique across classes: a key)."""
    return os.path.join(directory, f"c{label}", f"{index:06d}.jpg")


def _write_range(args: tuple[ImageWorkload, str, int, int]) -> tuple[int, int, int]:
    w, directory, start, stop = args
    classes = labels(w)
    nbytes = width = height = 0
    from PIL import Image

    for i in range(start, stop):
        data = make_image(w.seed, i)
        with open(image_path(directory, int(classes[i]), i), "wb") as f:
            f.write(data)
        nbytes += len(data)
        with Image.open(io.BytesIO(data)) as img:
            width += img.width
            height += img.height
    return nbytes, width, height


def generate(w: ImageWorkload, directory: str, processes: int | None = None) -> dict:
    """Write the images into ``directory`` (once; reused when DIR.json has the same spec); returns
    the stats."""
    marker = directory.rstrip("/") + ".json"
    spec = {**asdict(w), "format": FORMAT}
    if os.path.exists(marker):
        with open(marker) as f:
            done = json.load(f)
        if done["spec"] == spec:
            return done["stats"]
    for c in range(w.classes):
        os.makedirs(os.path.join(directory, f"c{c}"), exist_ok=True)
    processes = processes or os.cpu_count() or 1
    step = 250
    jobs = [(w, directory, s, min(s + step, w.images)) for s in range(0, w.images, step)]
    with ProcessPoolExecutor(processes, mp_context=get_context("fork")) as pool:
        parts = list(pool.map(_write_range, jobs))
    nbytes, width, height = (sum(p[k] for p in parts) for k in range(3))
    stats = {
        "images": w.images,
        "bytes": nbytes,
        "mean_bytes": nbytes / w.images,
        "mean_width": width / w.images,
        "mean_height": height / w.images,
    }
    with open(marker, "w") as f:
        json.dump({"spec": spec, "stats": stats}, f, indent=1)
    return stats


def jpeg_files(w: ImageWorkload, directory: str) -> list[tuple[str, int]]:
    """(path, label) of every image, sorted by path: class folder, then name (the order every writer
    uses)."""
    classes = labels(w)
    return sorted(
        (image_path(directory, int(classes[i]), i), int(classes[i])) for i in range(w.images)
    )
