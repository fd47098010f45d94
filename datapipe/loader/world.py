"""Who is reading: a rank of a world of ranks. A value, built at the edge from arguments or what is
detected."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from datapipe.errors import ConfigError

Detect = Callable[[], tuple[int, int] | None]  # (rank, world size) of a running job, or None


@dataclass(frozen=True)
class World:
    """Rank ``rank`` of ``world_size`` ranks.

    (A rank's DataLoader workers are not part of it: which worker makes which batch is dealt inside
    the workers, from the DataLoader's worker info, by ``schedule.worker_steps``.)
    """

    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} is not within a world of {self.world_size}")


def world_from_env(env: Mapping[str, str]) -> tuple[int, int] | None:
    """(rank, world size) from torchrun's RANK and WORLD_SIZE variables, when both are set."""
    if "RANK" in env and "WORLD_SIZE" in env:
        try:
            return int(env["RANK"]), int(env["WORLD_SIZE"])
        except ValueError:
            raise ConfigError(
                f"RANK={env['RANK']!r} and WORLD_SIZE={env['WORLD_SIZE']!r} must be integers"
            ) from None
    return None


def resolve_world(
    rank: int | None, world_size: int | None, env: Mapping[str, str], detect: Detect | None = None
) -> World:
    """The world: ``rank`` and ``world_size`` as given, else what ``detect`` finds
    (torch.distributed's default process group, say), else RANK/WORLD_SIZE in ``env``, else rank 0
    of 1."""
    if rank is not None and world_size is not None:
        return World(rank, world_size)
    if rank is not None or world_size is not None:
        raise ConfigError("give both rank and world_size, or neither (then they are detected)")
    detected = detect() if detect is not None else None
    if detected is not None:
        return World(*detected)
    from_env = world_from_env(env)
    return World(*from_env) if from_env else World()
