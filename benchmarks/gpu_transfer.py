"""Batches to the GPU: pinned batches from datapipe.Loader copied to CUDA, checked against the CPU
batches.

Run on a machine with a CUDA GPU (``python -m benchmarks.gpu_transfer [--samples N --payload
BYTES]``):
writes a dataset of random payloads into a temporary store, then for num_workers 0 and 2, with and
without pin_memory, iterates one epoch, copies every batch to the GPU (``non_blocking=True`` when
pinned), checks every payload byte on the GPU against the CPU batch, and prints the rate in GB/s and
whether batches were pinned. Without CUDA it runs the same loop on the CPU (a smoke run).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np


def write(root: str, samples: int, payload: int) -> str:
    """A committed dataset of ``samples`` random payloads (field bin) with an int label (field
    cls)."""
    from datapipe.formats.registry import get_format
    from datapipe.versioning.manifest import Manifest
    from datapipe.versioning.store import Store

    rng = np.random.default_rng(0)
    fmt = get_format("webdataset")
    writer = Store(root).begin("gpu")
    per_shard = max(1, (64 << 20) // (payload + 1024))
    entries = []
    for i, start in enumerate(range(0, samples, per_shard)):
        count = min(per_shard, samples - start)
        blob = rng.bytes(count * payload)
        entries.append(
            writer.write_shard(
                i,
                [
                    {
                        "__key__": f"s{start + j:08d}",
                        "cls": str((start + j) % 10).encode(),
                        "bin": blob[j * payload : (j + 1) * payload],
                    }
                    for j in range(count)
                ],
                fmt,
            )
        )
    writer.commit(
        Manifest(
            name="gpu",
            shard_format=fmt.name,
            fields={"cls": "int", "bin": "bytes"},
            shards=tuple(entries),
        )
    )
    return f"{root}/gpu"


def epoch(url: str, num_workers: int, pin: bool, device: str, check: bool) -> dict:
    """One epoch to ``device``: rate and pinned batches; with ``check``, every byte copied back and
    compared with the CPU batch (not timed: run it as a separate epoch)."""
    import torch

    import datapipe

    loader = datapipe.Loader(
        url,
        batch_size=256,
        num_workers=num_workers,
        shuffle=True,
        seed=1,
        pin_memory=pin,
        decode={"bin": "ragged"},
    )
    nbytes = batches = pinned = 0
    mismatches = 0
    start = time.perf_counter()
    for batch in loader:
        values, offsets = batch["bin"]
        pinned += int(values.is_pinned()) if device == "cuda" else 0
        on_device = values.to(device, non_blocking=pin)
        labels = batch["cls"].to(device, non_blocking=pin)
        if check and not (
            torch.equal(on_device.cpu(), values) and torch.equal(labels.cpu(), batch["cls"])
        ):
            mismatches += 1
        nbytes += values.numel()
        batches += 1
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    result = {
        "workers": num_workers,
        "pin_memory": pin,
        "batches": batches,
        "pinned_batches": pinned,
    }
    if check:
        return {**result, "mismatched_batches": mismatches}
    return {**result, "GB/s": round(nbytes / seconds / 1e9, 3), "seconds": round(seconds, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--payload", type=int, default=100 * 1024)
    args = parser.parse_args()
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(
        json.dumps(
            {
                "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
                "torch": torch.__version__,
            }
        )
    )
    with tempfile.TemporaryDirectory() as root:
        url = write(root, args.samples, args.payload)
        for workers in (0, 2):
            for pin in (False, True):
                # also warms up
                print(json.dumps(epoch(url, workers, pin, device, check=True)), flush=True)
                print(json.dumps(epoch(url, workers, pin, device, check=False)), flush=True)


if __name__ == "__main__":
    main()
