"""Global steps: the index of a global batch counted from step 0 of epoch 0, across epochs; and
skips of them.

Every epoch has the same number of steps (ranks are equal), so a step is an (epoch, batch of that
epoch) by arithmetic. A resume with another world size or batch size starts a new stretch of the
timeline at its step, epoch and position (the ``anchor``); steps before it ran under the old world.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from datapipe.errors import ConfigError
from datapipe.loader.schedule import BatchPlan, DropLast


@dataclass(frozen=True)
class Timeline:
    """Steps from the anchor (``step``, ``epoch``, ``position``) on, for ``total`` samples an
    epoch."""

    total: int
    batch_size: int
    world_size: int = 1
    drop_last: DropLast = True
    step: int = 0
    epoch: int = 0
    position: int = 0

    def plan(self, epoch: int) -> BatchPlan:
        """The batches of ``epoch`` this stretch delivers (the anchor's epoch from its position)."""
        if epoch < self.epoch:
            raise ConfigError(
                f"epoch {epoch} ran before step {self.step} under another world or batch size"
            )
        start = self.position if epoch == self.epoch else 0
        return BatchPlan(self.total, self.batch_size, self.world_size, self.drop_last, start)

    @property
    def steps_per_epoch(self) -> int:
        """Steps of a whole epoch."""
        return BatchPlan(self.total, self.batch_size, self.world_size, self.drop_last).num_batches()

    def first_step(self, epoch: int) -> int:
        """The global step of ``epoch``'s first batch in this stretch."""
        if epoch == self.epoch:
            return self.step
        return (
            self.step
            + self.plan(self.epoch).num_batches()
            + (epoch - self.epoch - 1) * self.steps_per_epoch
        )

    def locate(self, step: int) -> tuple[int, int]:
        """(epoch, batch of that epoch's plan) of global step ``step``."""
        if step < self.step:
            raise ConfigError(
                f"step {step} ran before the resume at step {self.step} with another world size "
                f"or batch size; ask it of a loader with that run's settings"
            )
        first = self.plan(self.epoch).num_batches()
        if step < self.step + first:
            return self.epoch, step - self.step
        per_epoch = self.steps_per_epoch
        if per_epoch == 0:
            raise ConfigError(
                f"an epoch of {self.total} samples has no global batch of "
                f"{self.batch_size * self.world_size}; there is no step {step}"
            )
        later, index = divmod(step - self.step - first, per_epoch)
        return self.epoch + 1 + later, index


@dataclass(frozen=True)
class Skips:
    """Global steps no rank delivers: half-open ranges [start, end), merged."""

    ranges: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, ranges: Iterable[Iterable[int]]) -> Skips:
        """Skips from (start, end) pairs; a ConfigError for a pair that is not 0 <= start < end."""
        skips = cls()
        for pair in ranges:
            try:
                start, end = (int(v) for v in pair)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"skip_steps: {pair!r} is not a (start, end) pair of steps"
                ) from None
            skips = skips.add(start, end)
        return skips

    def add(self, start: int, end: int) -> Skips:
        """These skips and [start, end)."""
        if not 0 <= start < end:
            raise ConfigError(
                f"skip_steps({start}, {end}): give 0 <= start < end (end is excluded)"
            )
        merged: list[tuple[int, int]] = []
        for a, b in sorted([*self.ranges, (start, end)]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        return Skips(tuple(merged))

    def __contains__(self, step: int) -> bool:
        return any(a <= step < b for a, b in self.ranges)

    def kept(self, first: int, n: int) -> np.ndarray | None:
        """Of the plan steps 0..n-1 (global steps first..first+n-1), those not skipped; None when
        none is."""
        steps = np.arange(n, dtype=np.int64)
        keep = np.ones(n, dtype=bool)
        for a, b in self.ranges:
            if a < first + n and b > first:
                keep[max(a - first, 0) : b - first] = False
        return None if keep.all() else steps[keep]
