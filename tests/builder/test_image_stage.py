"""The image stage: broken images quarantined with their reason and path, the rest kept or
re-encoded smaller."""

import io
import struct
import sys
import zlib

import pandas as pd
import pytest
from PIL import Image

from datapipe.builder.config import load_pipeline, parse_pipeline
from datapipe.builder.image_stage import jpeg_ready
from datapipe.builder.run import build
from datapipe.errors import ConfigError
from datapipe.versioning.manifest import REJECTED_NAME
from datapipe.versioning.store import Store


def encoded(im: Image.Image, fmt: str, **save) -> bytes:
    out = io.BytesIO()
    im.save(out, format=fmt, **save)
    return out.getvalue()


def halves(size=(80, 40)) -> Image.Image:
    """Red left half, blue right half: shows which way an image was turned."""
    im = Image.new("RGB", size, (255, 0, 0))
    im.paste((0, 0, 255), (size[0] // 2, 0, size[0], size[1]))
    return im


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` grey pixels and whose data holds none."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b""))
        + chunk(b"IEND", b"")
    )


def rotated_jpeg() -> bytes:
    """Stored 80x40, EXIF orientation 6: shown turned 90 degrees clockwise, 40x80."""
    exif = Image.Exif()
    exif[0x0112] = 6
    return encoded(halves(), "JPEG", quality=95, exif=exif.tobytes())


def palette_png() -> bytes:
    im = Image.new("P", (40, 40), 1)
    im.putpalette([0, 0, 0, 0, 200, 0] + [0] * 762)
    im.paste(0, (0, 0, 20, 40))  # palette entry 0 is transparent
    return encoded(im, "PNG", transparency=0)


GOOD_JPEG = encoded(halves(), "JPEG", quality=90)
# cut in half: in its pixels
GRADIENT_JPEG = encoded(Image.linear_gradient("L").convert("RGB"), "JPEG", quality=95)
GOOD = {
    "good.jpg": GOOD_JPEG,
    "good.png": encoded(halves((30, 30)), "PNG"),
    "cmyk.jpg": encoded(Image.new("CMYK", (60, 40), (0, 255, 255, 0)), "JPEG", quality=95),
    "palette.png": palette_png(),
    "grey16.png": encoded(Image.new("I;16", (40, 20), 32768), "PNG"),
    "rotated.jpg": rotated_jpeg(),
}
BAD = {
    "corrupt.jpg": b"\xff\xd8\xff\xe0 this is no JPEG at all " * 8,
    "text.png": b"hello, not an image",
    "truncated.jpg": GRADIENT_JPEG[: len(GRADIENT_JPEG) // 2],
    "empty.jpg": b"",
    "tiny.png": encoded(Image.new("RGB", (40, 7)), "PNG"),
    "bomb.png": png_claiming(100_000, 100_000),  # past twice Pillow's limit: Pillow raises at open
    "bomb-warn.png": png_claiming(10_000, 10_000),  # past Pillow's limit: Pillow warns at open
}
REASONS = {
    "corrupt.jpg": "corrupt image header",
    "text.png": "not an image Pillow can read",
    "truncated.jpg": "corrupt or truncated JPEG image",
    "empty.jpg": "empty file (0 bytes)",
    "tiny.png": "PNG image of 40x7 is smaller than min_side 8",
    "bomb.png": "decompression bomb, not decoded",
    "bomb-warn.png": "decompression bomb, not decoded",
}


def write_images(project, images, folder="data/img"):
    for name, data in images.items():
        project.write(f"{folder}/{name}", data)


def pipeline(project, stage: str, name="pipeline.yaml", dataset="imgs") -> None:
    project.write(
        name,
        f"name: {dataset}\nsource: "
        f"{{path: data, format: class_folders}}\nstages:\n  - image: {stage}\n"
        "sample: {key: key, fields: {img: bytes, rel: path}}\nmax_rejected: 1\n",
    )


def kept(project, result) -> dict[str, bytes]:
    return {s["rel"].decode().rsplit("/", 1)[1]: s["img"] for s in project.samples(result)}


def reasons(project, result) -> dict[str, str]:
    frame = pd.read_parquet(
        project.store.path(result.manifest.name, "versions", result.manifest.version, REJECTED_NAME)
    )
    assert set(frame.stage) == {"stages[0].image"}
    return {
        src.rsplit("/", 1)[1]: reason
        for src, reason in zip(frame.source, frame.reason, strict=True)
    }


def test_broken_images_are_quarantined_with_reason_and_path_the_rest_kept_as_they_are(project):
    write_images(project, {**GOOD, **BAD})
    pipeline(project, "{min_side: 8}")
    result = project.build()
    assert kept(project, result) == GOOD  # unchanged bytes: without resize nothing is re-encoded
    got = reasons(project, result)
    assert set(got) == set(BAD)
    for name, expected in REASONS.items():
        assert got[name].startswith(f"img/{name}: ") and expected in got[name], got[name]
    stage = result.manifest.stages[1]
    assert (stage.stage, stage.rows_in, stage.rows_out, stage.rejected) == (
        "stages[0].image",
        13,
        6,
        7,
    )


def test_header_verification_is_cheaper_and_lets_a_truncated_jpeg_through(project):
    truncated_png = GOOD["good.png"][:-30]
    write_images(
        project,
        {
            "good.jpg": GOOD_JPEG,
            "truncated.jpg": BAD["truncated.jpg"],
            "cut.png": truncated_png,
            "bomb.png": BAD["bomb.png"],
        },
    )
    pipeline(project, "{verify: header}")
    result = project.build()
    # JPEG data is not decoded by verify
    assert set(kept(project, result)) == {"good.jpg", "truncated.jpg"}
    got = reasons(project, result)
    assert set(got) == {"cut.png", "bomb.png"} and "corrupt or truncated PNG" in got["cut.png"]


def test_max_pixels_lowers_the_bomb_limit_before_decoding(project):
    write_images(
        project,
        {"big.png": encoded(Image.new("L", (64, 64)), "PNG"), "small.png": GOOD["good.png"]},
    )
    pipeline(project, "{max_pixels: 1000}")
    result = project.build()
    assert set(kept(project, result)) == {"small.png"}
    assert "64x64 is 4096 pixels, over the limit of 1000" in reasons(project, result)["big.png"]


def test_resize_re_encodes_large_and_rotated_images_upright_in_rgb_or_grey(project):
    write_images(project, GOOD)
    pipeline(project, "{resize: {max_side: 32, quality: 90}}")
    out = {
        name: Image.open(io.BytesIO(data)) for name, data in kept(project, project.build()).items()
    }
    # 30x30: within max_side, kept as is
    assert kept(project, project.build())["good.png"] == GOOD["good.png"]
    sizes = {name: im.size for name, im in out.items()}
    assert sizes == {
        "good.jpg": (32, 16),
        "good.png": (30, 30),
        "cmyk.jpg": (32, 21),
        "palette.png": (32, 32),
        "grey16.png": (32, 16),
        "rotated.jpg": (16, 32),
    }
    for name, im in out.items():
        if name != "good.png":
            assert im.format == "JPEG" and im.mode in ("RGB", "L") and not im.getexif(), name
            assert "icc_profile" not in im.info and "exif" not in im.info
    # scaled, not clipped
    assert out["grey16.png"].mode == "L" and abs(out["grey16.png"].getpixel((5, 5)) - 128) <= 2
    red = out["cmyk.jpg"].convert("RGB").getpixel((16, 10))
    assert red[0] > 200 and red[1] < 60 and red[2] < 60
    palette = out["palette.png"].convert("RGB")
    # transparent -> white
    assert min(palette.getpixel((3, 16))) > 240 and palette.getpixel((28, 16))[1] > 150
    rotated = out["rotated.jpg"].convert("RGB")  # turned clockwise: the red left half is now on top
    assert rotated.getpixel((8, 4))[0] > 200 and rotated.getpixel((8, 28))[2] > 200


def test_a_rotated_image_without_resize_keeps_its_bytes_and_exif(project):
    write_images(project, {"rotated.jpg": GOOD["rotated.jpg"]})
    pipeline(project, "{}")
    data = kept(project, project.build())["rotated.jpg"]
    assert data == GOOD["rotated.jpg"] and Image.open(io.BytesIO(data)).getexif()[0x0112] == 6


def test_resized_bytes_are_the_same_in_two_builds(project, tmp_path):
    write_images(
        project,
        {"good.jpg": GOOD_JPEG, "cmyk.jpg": GOOD["cmyk.jpg"], "rotated.jpg": GOOD["rotated.jpg"]},
    )
    pipeline(project, "{resize: {max_side: 24, quality: 80}}")
    first = project.build()
    other = Store(str(tmp_path / "other-store"))
    second = build(load_pipeline(project.root / "pipeline.yaml"), other)
    assert second.manifest.version == first.manifest.version  # the id covers every shard's sha256
    images = kept(project, first)
    assert images == {
        s["rel"].decode().rsplit("/", 1)[1]: s["img"]
        for s in project.samples(second.manifest, other)
    }
    # all three were re-encoded
    assert all(data != GOOD.get(name, GOOD_JPEG) for name, data in images.items())


def test_jpeg_ready_handles_the_modes_jpeg_cannot_hold():
    modes = {
        "LA": Image.new("LA", (4, 4), (0, 0)),
        "RGBA": Image.new("RGBA", (4, 4), (0, 0, 0, 255)),
        "1": Image.new("1", (4, 4), 1),
        "I;16": Image.new("I;16", (4, 4), 65535),
        "HSV": Image.new("HSV", (4, 4)),
    }
    out = {mode: jpeg_ready(im) for mode, im in modes.items()}
    assert {mode: im.mode for mode, im in out.items()} == {
        "LA": "L",
        "RGBA": "RGB",
        "1": "L",
        "I;16": "L",
        "HSV": "RGB",
    }
    # alpha 0: white
    assert out["LA"].getpixel((0, 0)) == 255 and out["RGBA"].getpixel((0, 0)) == (0, 0, 0)
    assert out["I;16"].getpixel((0, 0)) == 255


HEAD = "name: t\nsource: {path: d, format: class_folders}\nstages:\n"
TAIL = "sample: {key: key, fields: {jpg: bytes}}\n"


@pytest.mark.parametrize(
    ("stage", "expected"),
    [
        ("{colum: bytes}", "stages[0].image.colum: unknown key 'colum'"),
        ("{verify: fast}", "stages[0].image.verify: Input should be 'full' or 'header'"),
        ("{min_side: 0}", "stages[0].image.min_side: Input should be greater than or equal to 1"),
        (
            "{resize: {max_side: 64, quality: 0}}",
            "stages[0].image.resize.quality: Input should be greater than",
        ),
        ("{resize: {quality: 90}}", "stages[0].image.resize.max_side: required key is missing"),
    ],
)
def test_bad_image_stages_name_the_field(stage, expected):
    text = f"{HEAD}  - image: {stage}\n{TAIL}"
    with pytest.raises(ConfigError) as info:
        parse_pipeline(text, "p.yaml")
    assert f"p.yaml:4: {expected}" in str(info.value)


def test_an_image_stage_with_no_value_takes_the_defaults():
    text = f"{HEAD}  - image:\n{TAIL}"
    stage = parse_pipeline(text, "p.yaml").stages[0]
    assert (stage.kind, stage.args.column, stage.args.verify, stage.args.min_side) == (
        "image",
        "bytes",
        "full",
        1,
    )
    assert stage.canonical() == {"image": {}}


def test_a_missing_column_at_build_time_names_the_field(project):
    write_images(project, {"good.jpg": GOOD_JPEG})
    pipeline(project, "{column: pixels}")
    with pytest.raises(ConfigError, match=r"stages\[0\].image.column: no column 'pixels'"):
        project.build()


def test_without_pillow_the_image_stage_says_how_to_install_it(monkeypatch):
    # what an environment without Pillow gives `import PIL`
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(
        ConfigError, match=r"p.yaml:4: stages\[0\].image: the image stage needs Pillow.*\[images\]"
    ):
        parse_pipeline(f"{HEAD}  - image: {{}}\n{TAIL}", "p.yaml")
