"""Who is reading: a rank of a world of ranks, and a DataLoader worker of that rank. A value, built at the edge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from datapipe.errors import ConfigError


@dataclass(frozen=True)
class World:
    """Rank ``rank`` of ``world_size`` ranks, DataLoader worker ``worker`` of ``num_workers`` (0 = in process)."""

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 0

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} is not within a world of {self.world_size}")
        if self.num_workers < 0 or (self.num_workers and not 0 <= self.worker < self.num_workers):
            raise ConfigError(f"worker {self.worker} is not within {self.num_workers} workers")


def world_from_env(env: Mapping[str, str]) -> tuple[int, int] | None:
    """(rank, world size) from torchrun's RANK and WORLD_SIZE variables, when both are set."""
    if "RANK" in env and "WORLD_SIZE" in env:
        try:
            return int(env["RANK"]), int(env["WORLD_SIZE"])
        except ValueError:
            raise ConfigError(f"RANK={env['RANK']!r} and WORLD_SIZE={env['WORLD_SIZE']!r} must be integers") from None
    return None
