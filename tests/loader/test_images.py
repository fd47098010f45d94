"""datapipe.image: images decoded into one batch array, with crops that depend on (seed, epoch, key)
alone."""

import io

import numpy as np
import pytest
from PIL import Image

import datapipe
from datapipe.errors import ConfigError, SampleError
from datapipe.formats.registry import get_format
from datapipe.loader.images.boxes import crop_box, uniforms
from datapipe.loader.images.decode import decode_into
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store

TRAIN = datapipe.image(size=32, crop="random-resized", flip=True)


def photo(seed: int, size=(120, 90), mode="RGB", fmt="JPEG", **save) -> bytes:
    """A smooth, photo-like image (gradients and blobs), encoded."""
    rng = np.random.default_rng(seed)
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    channels = [
        np.sin(x / rng.uniform(5, 30) + rng.uniform(0, 6)) + np.cos(y / rng.uniform(5, 30))
        for _ in range(3)
    ]
    pixels = ((np.stack(channels, axis=-1) + 2) * 63).astype(np.uint8)
    image = Image.fromarray(pixels, "RGB")
    if mode != "RGB":
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, fmt, **save)
    return out.getvalue()


def write(root, images: list[bytes], per_shard: int = 16) -> str:
    samples = [
        {"__key__": f"img{i:04d}", "jpg": data, "cls": str(i % 10).encode()}
        for i, data in enumerate(images)
    ]
    writer = Store(str(root)).begin("images")
    fmt = get_format("webdataset")
    shards = tuple(
        writer.write_shard(s, samples[at : at + per_shard], fmt)
        for s, at in enumerate(range(0, len(samples), per_shard))
    )
    writer.commit(
        Manifest(
            name="images",
            shard_format="webdataset",
            fields={"jpg": "bytes", "cls": "int"},
            shards=shards,
        )
    )
    return f"{root}/images"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    sizes = [(120, 90), (90, 120), (200, 60), (64, 64), (300, 220)]
    return write(
        tmp_path_factory.mktemp("images"), [photo(i, sizes[i % len(sizes)]) for i in range(48)]
    )


def by_key(loader) -> dict[str, np.ndarray]:
    out = {}
    for batch in loader:
        for key, image in zip(batch["__key__"], np.asarray(batch["jpg"]), strict=True):
            out[key] = image
    return out


def test_a_batch_is_one_uint8_array_of_the_asked_shape(dataset):
    batch = next(iter(datapipe.Loader(dataset, batch_size=8, decode={"jpg": TRAIN})))
    assert tuple(batch["jpg"].shape) == (8, 3, 32, 32) and str(batch["jpg"].dtype) == "torch.uint8"
    hwc = next(
        iter(
            datapipe.Loader(
                dataset,
                batch_size=8,
                decode={"jpg": datapipe.image(32, layout="HWC", dtype="float32")},
            )
        )
    )
    assert tuple(hwc["jpg"].shape) == (8, 32, 32, 3) and float(hwc["jpg"].max()) <= 1.0


def test_the_same_pixels_for_a_sample_under_any_workers_world_size_and_resume(dataset):
    one = by_key(
        datapipe.Loader(dataset, batch_size=8, shuffle=True, seed=3, decode={"jpg": TRAIN})
    )
    workers = by_key(
        datapipe.Loader(
            dataset, batch_size=6, shuffle=True, seed=3, num_workers=2, decode={"jpg": TRAIN}
        )
    )
    ranks = {}
    for rank in range(3):
        ranks.update(
            by_key(
                datapipe.Loader(
                    dataset,
                    batch_size=4,
                    shuffle=True,
                    seed=3,
                    rank=rank,
                    world_size=3,
                    decode={"jpg": TRAIN},
                )
            )
        )
    first = datapipe.Loader(
        dataset, batch_size=8, shuffle=True, seed=3, world_size=2, rank=0, decode={"jpg": TRAIN}
    )
    it = iter(first)
    next(it), next(it)
    state = first.state_dict()
    resumed = datapipe.Loader(dataset, batch_size=6, shuffle=True, seed=3, decode={"jpg": TRAIN})
    resumed.load_state_dict(state)  # another world size (2 -> 1) and batch size mid-epoch
    after = by_key(resumed)
    assert set(one) == set(workers) and len(one) == 48
    for key, image in one.items():
        assert np.array_equal(image, workers[key])
        if key in ranks:
            assert np.array_equal(image, ranks[key])
        if key in after:
            assert np.array_equal(image, after[key])
    assert after and set(ranks) >= set(after)


def test_another_epoch_or_seed_gives_other_crops(dataset):
    loader = datapipe.Loader(dataset, batch_size=16, seed=1, decode={"jpg": TRAIN})
    epoch0 = by_key(loader)
    epoch1 = by_key(loader)
    seed2 = by_key(datapipe.Loader(dataset, batch_size=16, seed=2, decode={"jpg": TRAIN}))
    assert sum(not np.array_equal(epoch0[k], epoch1[k]) for k in epoch0) > 40
    assert sum(not np.array_equal(epoch0[k], seed2[k]) for k in epoch0) > 40


def test_boxes_follow_torchvisions_random_resized_crop_bounds():
    u = uniforms([f"k{i}" for i in range(2000)], seed=0, epoch=0)
    assert u.shape[1] == 23 and 0 <= u.min() and u.max() < 1
    flips = 0
    for row in u:
        box = crop_box(TRAIN, 400, 300, row)
        w, h = box.right - box.left, box.bottom - box.top
        assert 0 <= box.left and box.right <= 400 and 0 <= box.top and box.bottom <= 300
        assert 0.08 * 120_000 * 0.9 <= w * h <= 120_000 and 3 / 4 * 0.95 <= w / h <= 4 / 3 * 1.05
        flips += box.flip
    assert 900 < flips < 1100  # about half


def test_the_center_crop_is_the_resize_then_crop_of_torchvisions_eval_transform():
    spec = datapipe.image(224, crop="center", flip=False)  # resize the short side to 256, crop 224
    box = crop_box(spec, 512, 384, np.zeros(23))
    assert (box.right - box.left, box.bottom - box.top) == (336, 336) and (box.left, box.top) == (
        88,
        24,
    )
    data = photo(0, (512, 384))
    slot = np.empty((3, 224, 224), np.uint8)
    decode_into(
        datapipe.image(224, crop="center", flip=False, draft=False), data, np.zeros(23), slot
    )
    with Image.open(io.BytesIO(data)) as img:
        short = img.convert("RGB").resize((341, 256), Image.Resampling.BILINEAR)
        reference = np.asarray(short)[16:240, 58:282].transpose(2, 0, 1).astype(int)
    # one resample of the box against two steps
    assert np.abs(slot.astype(int) - reference).mean() < 3


def test_the_draft_decode_is_close_to_the_full_decode():
    data = photo(5, (800, 600), quality=92)
    u = uniforms(["a"], 0, 0)[0]
    spec = datapipe.image(64, crop="center", flip=False)
    full, draft = np.empty((3, 64, 64), np.uint8), np.empty((3, 64, 64), np.uint8)
    decode_into(spec, data, u, draft)
    decode_into(datapipe.image(64, crop="center", flip=False, draft=False), data, u, full)
    mse = np.mean((full.astype(float) - draft.astype(float)) ** 2)
    assert 10 * np.log10(255**2 / max(mse, 1e-9)) > 30  # PSNR in dB


@pytest.mark.parametrize(
    "mode,fmt", [("L", "PNG"), ("P", "PNG"), ("RGBA", "PNG"), ("CMYK", "JPEG"), ("L", "JPEG")]
)
def test_every_mode_becomes_three_channels(mode, fmt):
    slot = np.empty((3, 16, 16), np.uint8)
    decode_into(datapipe.image(16), photo(1, mode=mode, fmt=fmt), np.full(23, 0.5), slot)
    assert slot.std() > 0


def test_a_sixteen_bit_png_keeps_its_top_eight_bits():
    grey = np.tile(np.linspace(0, 65535, 64).astype(np.uint16), (64, 1))
    out = io.BytesIO()
    Image.fromarray(grey).save(out, "PNG")
    slot = np.empty((64, 64, 3), np.uint8)
    decode_into(
        datapipe.image(64, crop=None, flip=False, layout="HWC"), out.getvalue(), np.zeros(23), slot
    )
    assert slot[0, 0, 0] < 8 and slot[0, -1, 0] > 245 and (slot[..., 0] == slot[..., 2]).all()


def test_a_corrupt_image_names_the_sample_and_the_fix(tmp_path):
    url = write(tmp_path, [photo(0), photo(1)[:200], photo(2)], per_shard=3)
    with pytest.raises(SampleError, match=r"field 'jpg' of sample 'img0001'.*`image` stage"):
        list(datapipe.Loader(url, batch_size=3, decode={"jpg": TRAIN}))


def test_a_decompression_bomb_is_refused_not_decoded(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(SampleError, match="DecompressionBomb"):
        decode_into(TRAIN, photo(0, (120, 90)), np.zeros(23), np.empty((3, 32, 32), np.uint8))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"crop": "random"}, "crop"),
        ({"layout": "NCHW"}, "layout"),
        ({"dtype": "int16"}, "dtype"),
        ({"size": 0}, "size"),
        ({"scale": (0.5, 0.1)}, "scale"),
        ({"resize": 10}, "resize"),
        ({"device": "tpu"}, "device"),
    ],
)
def test_bad_options_are_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        datapipe.image(**{"size": 32, **kwargs})


def test_cuda_without_a_device_is_a_config_error(dataset):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: benchmarks/gpu_images.py runs that path")
    with pytest.raises(ConfigError, match="no CUDA device"):
        datapipe.Loader(dataset, batch_size=4, decode={"jpg": datapipe.image(32, device="cuda")})


def test_workers_decode_straight_into_the_packed_buffer(dataset):
    from datapipe.loader.batch_buffers import numpy_view, pack, unpack
    from datapipe.loader.collate import Images, collate
    from datapipe.loader.dataset import open_dataset

    ds = open_dataset(dataset)
    keys, columns = ds.read_columns(np.zeros(8, dtype=np.int64), np.arange(8), ["jpg"])
    spec = TRAIN.at(seed=4, epoch=2)
    deferred = collate(keys, columns, {"jpg": spec}, defer=("ragged",))
    assert isinstance(deferred["jpg"], Images)
    buffer, layout = pack(deferred)
    assert [kind for name, kind, _ in layout if name == "jpg"] == ["array"]
    packed = unpack(buffer, layout, numpy_view)["jpg"]
    assert np.shares_memory(packed, buffer)
    assert np.array_equal(packed, collate(keys, columns, {"jpg": spec})["jpg"])


def test_an_image_smaller_than_the_crop_is_scaled_up():
    slot = np.empty((3, 64, 64), np.uint8)
    for crop in ("random-resized", "center", None):
        decode_into(datapipe.image(64, crop=crop), photo(3, (20, 15)), np.full(23, 0.3), slot)
        assert slot.std() > 0


def test_transparent_pixels_are_laid_on_white_as_the_build_does():
    rgba = Image.new("RGBA", (8, 8), (10, 20, 30, 0))
    out = io.BytesIO()
    rgba.save(out, "PNG")
    slot = np.empty((8, 8, 3), np.uint8)
    decode_into(
        datapipe.image(8, crop=None, flip=False, layout="HWC"), out.getvalue(), np.zeros(23), slot
    )
    assert (slot == 255).all()


def test_class_folders_to_augmented_batches_end_to_end(tmp_path):
    from helpers.cli import datapipe_in_process

    for split in ("train", "val"):
        for c, name in enumerate(("cat", "dog", "emu")):
            folder = tmp_path / "raw" / split / name
            folder.mkdir(parents=True)
            for i in range(4):
                (folder / f"{i}.jpg").write_bytes(photo(100 * c + i, (80 + 10 * i, 60)))
    (tmp_path / "pets.yaml").write_text(
        "name: pets\nsource: {path: raw, format: class_folders}\n"
        "stages: [{image: {min_side: 16}}]\n"
        "sample: {key: key, fields: {jpg: bytes, cls: label}}\n"
    )
    done = datapipe_in_process("build", "pets.yaml", "--out", "store", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    loader = datapipe.Loader(
        str(tmp_path / "store" / "pets"),
        batch_size=6,
        shuffle=True,
        num_workers=2,
        decode={"jpg": datapipe.image(24, crop="random-resized")},
    )
    assert loader.dataset.manifest.classes == ("cat", "dog", "emu")
    batches = list(loader)
    labels = np.concatenate([np.asarray(b["cls"]) for b in batches])
    assert len(batches) == 4 and all(tuple(b["jpg"].shape) == (6, 3, 24, 24) for b in batches)
    assert sorted(labels.tolist()) == sorted([0, 1, 2] * 8)
