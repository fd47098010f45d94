"""Train a small GPT on a token version with DDP on CPU: packed rows, per-document attention, a
checkpoint with the loader's state, and an exact resume.

    python pipelines/prepare_text.py && datapipe build pipelines/text.yaml
    torchrun --standalone --nproc_per_node 2 examples/train_lm.py storage/text --checkpoint lm.pt

Each row is ``--length`` tokens packed by ``datapipe.pack`` (best-fit by default); attention stays
within each document, from the batch's ``position_ids`` (a piece starts where they restart at 0)
as a block-diagonal causal mask for ``scaled_dot_product_attention``. Rank 0 prints the loss as
JSON every ``--report-every`` steps and checkpoints every ``--checkpoint-every``; a job restarted
with the same ``--checkpoint`` continues with exactly the rows the uninterrupted job would have
trained next, and ends with the same weights.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

import datapipe


class Block(nn.Module):
    """Pre-norm attention and MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x plus attention within ``mask``, then plus the MLP."""
        b, n, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, -1).transpose(1, 3).unbind(2)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(1))
        x = x + self.out(attended.transpose(1, 2).reshape(b, n, width))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """Token and position embeddings, a few blocks, a linear head."""

    def __init__(self, vocab: int, length: int, width: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(length, width)
        self.blocks = nn.ModuleList(Block(width, 4) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits [B, L, vocab] of the next token, each document attending to itself alone."""
        x = self.tokens(ids) + self.positions(positions)
        mask = document_mask(positions)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


def document_mask(positions: torch.Tensor) -> torch.Tensor:
    """[B, L, L] bool: token i attends to token j when j <= i and both are in one piece (a piece
    starts where the positions restart at 0)."""
    piece = torch.cumsum(positions == 0, dim=1)
    same = piece.unsqueeze(2) == piece.unsqueeze(1)
    n = positions.shape[1]
    return same & torch.ones(n, n, dtype=torch.bool).tril()


def save(
    path: str, net: nn.Module, optimiser: torch.optim.Optimizer, loader: datapipe.Loader
) -> None:
    """Model, optimiser and loader state, written atomically."""
    state = {
        "model": net.state_dict(),
        "optimiser": optimiser.state_dict(),
        "loader": loader.state_dict(),
    }
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def arguments() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", help="a token version, e.g. storage/text")
    parser.add_argument("--steps", type=int, default=60, help="steps of the whole run")
    parser.add_argument("--length", type=int, default=128, help="tokens a row")
    parser.add_argument("--mode", default="best-fit", choices=["concat", "best-fit", "pad"])
    parser.add_argument("--batch-size", type=int, default=8, help="rows per rank and step")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--checkpoint", default="lm.pt")
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--report-every", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=None, help="stop this job early")
    return parser.parse_args()


def main() -> None:
    """Train, report and checkpoint; a restart continues from the checkpoint."""
    args = arguments()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    loader = datapipe.Loader(
        args.dataset,
        batch_size=args.batch_size,
        pack=datapipe.pack(args.length, mode=args.mode),
        num_workers=args.workers,
        seed=0,
    )
    vocab = loader.dataset.tokenizer.vocab_size
    net = DistributedDataParallel(GPT(vocab, args.length))
    optimiser = torch.optim.AdamW(net.parameters(), lr=3e-3)
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint, weights_only=False)
        net.module.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        loader.load_state_dict(state["loader"])
    done = 0
    while loader.step < args.steps and done != args.max_steps:
        loader.set_epoch(loader.epoch)
        for batch in loader:
            logits = net(batch["input_ids"], batch["position_ids"])
            loss = F.cross_entropy(
                logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100
            )
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            done, step = done + 1, loader.step  # the loader's step counts this batch as trained
            if rank == 0 and step % args.checkpoint_every == 0:
                save(args.checkpoint, net.module, optimiser, loader)
            if rank == 0 and step % args.report_every == 0:  # this step's loss
                print(json.dumps({"step": step, "loss": round(loss.item(), 4)}), flush=True)
            if step >= args.steps or done == args.max_steps:
                break
    if rank == 0:
        save(args.checkpoint, net.module, optimiser, loader)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
