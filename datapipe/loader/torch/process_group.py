"""The DDP world as torch.distributed sees it: the rank and size of the default process group."""

from __future__ import annotations

import torch.distributed as dist


def distributed_world() -> tuple[int, int] | None:
    """(rank, world size) of the initialised default process group, else None."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None
