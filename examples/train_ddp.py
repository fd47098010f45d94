"""Train a small CNN on the digits dataset with DDP on CPU, checkpointing model, optimiser and
loader state.

    datapipe build pipelines/digits.yaml torchrun --standalone --nproc_per_node 2
    examples/train_ddp.py storage/digits --checkpoint digits.pt

Rank 0 checkpoints every --checkpoint-every steps and at the end of every epoch. A job restarted
with the same --checkpoint (after a crash, a preemption, or --max-steps) continues from the last
checkpoint, mid-epoch too, with exactly the batches the uninterrupted run would have trained next:
it ends with the same weights.
It trains on the dataset's train split and evaluates on its val split (pipelines/digits.yaml's
splits:
section; a sample's split never changes between versions); rank 0 prints the accuracy on val as
JSON.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import datapipe


def model() -> nn.Module:
    """Two convolutions and two linear layers: plenty for 8x8 digits."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def images(batch: dict) -> torch.Tensor:
    """The batch's PNGs, decoded by the loader, as float images in [0, 1] with a channel axis."""
    return batch["png"].float().unsqueeze(1) / 255.0


def evaluate(net: nn.Module, url: str) -> float:
    """Accuracy on the val split, read in storage order (the padding of the last batch counted
    once)."""
    loader = datapipe.Loader(
        url,
        batch_size=128,
        shuffle=False,
        rank=0,
        world_size=1,
        num_workers=0,
        drop_last="pad",
        decode={"png": "image"},
        split="val",
    )
    correct = total = 0
    seen = set()
    net.eval()
    with torch.no_grad():
        for batch in loader:
            mask = torch.tensor([k not in seen for k in batch["__key__"]])
            seen.update(batch["__key__"])
            predicted = net(images(batch)[mask]).argmax(1)
            correct += int((predicted == batch["cls"][mask]).sum())
            total += int(mask.sum())
    net.train()
    return correct / max(total, 1)


def save(
    path: str, net: nn.Module, optimiser: torch.optim.Optimizer, loader: datapipe.Loader
) -> None:
    """Model, optimiser and loader state, written atomically (a job killed while saving keeps the
    previous one)."""
    torch.save(
        {
            "model": net.state_dict(),
            "optimiser": optimiser.state_dict(),
            "loader": loader.state_dict(),
        },
        path + ".tmp",
    )
    os.replace(path + ".tmp", path)


def main() -> None:
    """Train, checkpoint every few steps and every epoch, evaluate on rank 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", help="e.g. storage/digits or storage/digits@TAG")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--checkpoint", default="digits.pt")
    parser.add_argument(
        "--checkpoint-every", type=int, default=10, help="steps between checkpoints"
    )
    parser.add_argument(
        "--max-steps", type=int, default=None, help="stop after this many steps (then restart)"
    )
    args = parser.parse_args()
    if args.checkpoint_every < 1:
        parser.error("--checkpoint-every must be at least 1")

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = DistributedDataParallel(model())
    optimiser = torch.optim.Adam(net.parameters(), lr=3e-3)
    loader = datapipe.Loader(
        args.dataset,
        batch_size=args.batch_size,
        num_workers=args.workers,
        seed=0,
        decode={"png": "image"},
        split="train",
    )
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint, weights_only=False)
        net.module.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        loader.load_state_dict(state["loader"])
    loss_fn = nn.CrossEntropyLoss()

    # in this run; every rank takes the same steps (the loader gives each the same number of
    # batches)
    steps = 0
    # a restart from a checkpoint at an epoch's last batch trains none of it
    loss = torch.tensor(float("nan"))
    for epoch in range(loader.epoch, args.epochs):
        # a checkpoint's own epoch keeps its position: the rest of that epoch
        loader.set_epoch(epoch)
        for batch in loader:
            loss = loss_fn(net(images(batch)), batch["cls"])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            steps += 1
            # the loader state counts this batch as trained
            if rank == 0 and steps % args.checkpoint_every == 0:
                save(args.checkpoint, net.module, optimiser, loader)
            if steps == args.max_steps:
                break
        if steps == args.max_steps:
            break
        if rank == 0:  # the loader state now names the next epoch
            save(args.checkpoint, net.module, optimiser, loader)
            print(
                json.dumps(
                    {
                        "epoch": epoch,
                        "loss": round(loss.item(), 4),
                        "accuracy": round(evaluate(net.module, args.dataset), 4),
                    }
                ),
                flush=True,
            )
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
