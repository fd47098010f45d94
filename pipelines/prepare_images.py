"""Write a small ImageNet-style folder of generated images, two of them broken, for
pipelines/images.yaml.

pipelines/raw/images/{train,val}/{circle,square,stripes}/NNN.jpg (and a few .png): 30 images of
shapes on plain backgrounds, 96 to 400 pixels a side, made from a fixed seed (the same files
every run), plus an empty file and a truncated JPEG that the image stage quarantines.

    python pipelines/prepare_images.py [--out DIR]
"""

from __future__ import annotations

import argparse
import io
import os
import random

from PIL import Image, ImageDraw

HERE = os.path.dirname(os.path.abspath(__file__))
CLASSES = ("circle", "square", "stripes")


def draw(cls: str, rng: random.Random) -> Image.Image:
    """One image of class ``cls``: a random size, background and colour."""
    size = (rng.randint(96, 400), rng.randint(96, 400))
    im = Image.new("RGB", size, tuple(rng.randint(0, 120) for _ in range(3)))
    pen = ImageDraw.Draw(im)
    color = tuple(rng.randint(130, 255) for _ in range(3))
    w, h = size
    if cls == "circle":
        r = min(w, h) // 3
        pen.ellipse((w // 2 - r, h // 2 - r, w // 2 + r, h // 2 + r), fill=color)
    elif cls == "square":
        pen.rectangle((w // 4, h // 4, 3 * w // 4, 3 * h // 4), fill=color)
    else:
        for x in range(0, w, 16):
            pen.rectangle((x, 0, x + 7, h), fill=color)
    return im


def main() -> None:
    """Write the images."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", default=os.path.join(HERE, "raw", "images"), help="directory to write"
    )
    out = parser.parse_args().out
    rng = random.Random(18)
    for group, count in (("train", 8), ("val", 2)):
        for cls in CLASSES:
            os.makedirs(os.path.join(out, group, cls), exist_ok=True)
            for i in range(count):
                im, fmt = draw(cls, rng), "PNG" if i % 4 == 3 else "JPEG"
                name = os.path.join(out, group, cls, f"{i:03d}.{'png' if fmt == 'PNG' else 'jpg'}")
                im.save(name, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    buf = io.BytesIO()
    draw("circle", rng).save(buf, format="JPEG", quality=90)
    with open(os.path.join(out, "train", "circle", "truncated.jpg"), "wb") as f:
        f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
    open(os.path.join(out, "val", "square", "empty.jpg"), "wb").close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
