"""W4 on a GPU: ``datapipe.image(..., device="cuda")`` train and eval reads, against nvJPEG's own
floor (issue 18).

    python -m benchmarks.gpu_images --workdir DIR [--quick] [--out FILE]

For a lent GPU machine (run by hand, not by ``benchmarks.run``; it needs a CUDA build of torch and
torchvision, datapipe's dependencies, Pillow and scikit-learn, no network). Makes W4's JPEG folders
in DIR/w4/jpeg and builds them into DIR/w4/datapipe-img (both reused when there), then reads the
dataset with ``decode={"jpg": datapipe.image(size=224, crop=..., device="cuda")}`` (train:
random-resized crop + flip; eval: resize 256 + center crop), with 0 and 2 DataLoader workers,
and prints images/s. The floor is ``torchvision.io.decode_jpeg`` on lists of 256 payloads
with ``device="cuda"``, the files' bytes already in memory: the most a GPU decode of these
files can give. Exits with a message (status 2) when torch sees no CUDA device or this datapipe
has no ``datapipe.image``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from benchmarks import image_ours, image_run
from benchmarks.image_transforms import BATCH
from benchmarks.images import generate, image_workload, jpeg_files


def fail(msg: str) -> None:
    print(f"gpu_images: {msg}", file=sys.stderr)
    raise SystemExit(2)


def check() -> str:
    """The CUDA device's name; exits with a message when there is none or datapipe.image is
    missing."""
    try:
        import torch
    except ImportError:
        fail("torch is not installed; install a CUDA build of torch and torchvision")
    if not torch.cuda.is_available():
        fail(
            f"no CUDA device (torch {torch.__version__}, torch.version.cuda={torch.version.cuda}); "
            "run this on a machine with an NVIDIA GPU and a CUDA build of torch"
        )
    if not image_run.decoder_ready():
        fail(
            "this datapipe has no datapipe.image (issue 18's decoder); check out a "
            "commit that has it"
        )
    return torch.cuda.get_device_name(0)


def _timed(fn) -> dict:
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    images, first = fn()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    return {
        "images": images,
        "seconds": seconds,
        "images_per_s": images / seconds,
        "first_sum": first,
        "gpu_peak_mb": torch.cuda.max_memory_allocated() / 2**20,
    }


def read(store: str, kind: str, workers: int) -> dict:
    """One epoch of the datapipe loader with the GPU decode; every batch a uint8 (256, 3, 224, 224)
    CUDA tensor."""
    import datapipe

    def run() -> tuple[int, int]:
        loader = datapipe.Loader(
            image_ours.url(store),
            batch_size=BATCH,
            num_workers=workers,
            shuffle=False,
            decode={"jpg": image_ours.image_spec(kind, device="cuda")},
        )
        images = first = 0
        for batch in loader:
            jpg = batch["jpg"]
            if not (jpg.is_cuda and jpg.shape[1:] == (3, 224, 224)):
                raise RuntimeError(
                    f"expected a CUDA uint8 (N, 3, 224, 224) batch, got {jpg.device} "
                    f"{tuple(jpg.shape)}"
                )
            images += jpg.shape[0]
            first += int(jpg[:, 0, 0, 0].sum())
        return images, first

    return _timed(run)


def nvjpeg_floor(paths: list[str]) -> dict:
    """torchvision.io.decode_jpeg on lists of 256 in-memory payloads, on the GPU (no crop, no
    resize)."""
    import torch
    from torchvision.io import decode_jpeg

    payloads = []
    for path in paths:
        with open(path, "rb") as f:
            payloads.append(torch.frombuffer(bytearray(f.read()), dtype=torch.uint8))
    decode_jpeg(payloads[:BATCH], device="cuda")  # nvJPEG's start-up stays out of the timing

    def run() -> tuple[int, int]:
        first = 0
        for start in range(0, len(payloads), BATCH):
            images = decode_jpeg(payloads[start : start + BATCH], device="cuda")
            first += int(images[0][0, 0, 0])
        return len(payloads), first

    return _timed(run)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workdir", required=True, help="where W4's JPEGs and the datapipe build go (kept, reused)"
    )
    parser.add_argument("--quick", action="store_true", help="2,000 images instead of 20,000")
    parser.add_argument("--out", help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    device = check()
    w = image_workload(args.quick)
    workdir = os.path.join(args.workdir, w.name)
    images = os.path.join(workdir, "jpeg")
    stats = generate(w, images)
    store = os.path.join(workdir, image_run.OURS)
    if not os.path.isdir(os.path.join(store, image_ours.NAME)):
        from benchmarks import building

        building.build(
            image_ours.prepare(images, os.path.join(workdir, "source")),
            store,
            2,
            keep=True,
            env=image_run.build_env(),
        )
    results = {
        "device": device,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "images": stats,
        "floor": nvjpeg_floor([p for p, _ in jpeg_files(w, images)]),
        "reads": {},
    }
    for kind in ("train", "eval"):
        for workers in (0, 2):
            try:
                r = read(store, kind, workers)
            except Exception as e:  # one failing mode still leaves the others' figures
                r = {"error": f"{type(e).__name__}: {e}"}
            results["reads"][f"{kind}, {workers} workers"] = r
    print(f"W4 on {device}: {stats['images']:,} JPEGs, mean {stats['mean_bytes'] / 1e3:.1f} KB")
    print(
        f"  floor, torchvision.io.decode_jpeg(device='cuda'), lists of {BATCH}: "
        f"{results['floor']['images_per_s']:,.0f} images/s"
    )
    for mode, r in results["reads"].items():
        print(
            f"  datapipe.image(device='cuda'), {mode}: "
            + (
                r["error"]
                if "error" in r
                else f"{r['images_per_s']:,.0f} images/s "
                f"({r['images_per_s'] / results['floor']['images_per_s']:.2f}x "
                f"the floor), GPU peak {r['gpu_peak_mb']:.0f} MB"
            )
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
