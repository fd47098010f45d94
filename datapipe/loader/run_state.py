"""Where a training run's reading stands, and its state dict: epoch, position, global step, skips, a
mix's cursors.

Pure (no torch, no payload): the Loader keeps one, and the audit replays runs with it, resumes
included, so both go through the same state code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from datapipe.errors import ConfigError
from datapipe.loader.batches import BatchSource
from datapipe.loader.mix import Mix
from datapipe.loader.mix_order import Segment
from datapipe.loader.schedule import BatchPlan
from datapipe.loader.settings import LoaderSettings
from datapipe.loader.shard_set import ShardSet
from datapipe.loader.timeline import Skips, Timeline
from datapipe.loader.world import World
from datapipe.versioning.manifest import short_id

STATE_FORMAT = 2
READS = (
    "format",
    "dataset",
    "epoch",
    "position",
    "seed",
    "shuffle",
    "block_shards",
    "world_size",
    "batch_size",
)


class RunState:
    """The next batch of a run over ``data`` with ``settings`` in ``world``: epoch, position
    (samples all ranks consumed of the epoch) and the global step they make, from the timeline's
    anchor on."""

    def __init__(
        self, data: ShardSet, settings: LoaderSettings, world: World, skips: Skips | None = None
    ) -> None:
        self.data, self.settings, self.world = data, settings, world
        self.skips = skips or Skips()
        self.epoch = 0
        self.position = 0
        self.anchor = (0, 0, 0)  # (step, epoch, position) where this world and batch size took over

    @property
    def timeline(self) -> Timeline:
        """Global steps under this world and batch size."""
        s = self.settings
        return Timeline(
            len(self.data), s.batch_size, self.world.world_size, s.drop_last, *self.anchor
        )

    def plan(self) -> BatchPlan:
        """The batches left in the current epoch."""
        s = self.settings
        return BatchPlan(
            len(self.data), s.batch_size, self.world.world_size, s.drop_last, self.position
        )

    @property
    def step(self) -> int:
        """The global step of the next batch."""
        timeline = self.timeline
        start = timeline.plan(self.epoch).start
        return timeline.first_step(self.epoch) + -(
            -(self.position - start) // self.plan().global_batch
        )

    def delivered(self) -> np.ndarray | None:
        """The current plan's steps that are not skipped (None: all of them)."""
        return self.skips.kept(self.step, self.plan().num_batches())

    def batch_source(self) -> BatchSource:
        """What makes this rank's batches of the rest of the epoch (picklable)."""
        return BatchSource(
            self.data, self.settings, self.world, self.epoch, self.position, self.delivered()
        )

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``; the current epoch keeps its position (a resumed epoch)."""
        if epoch != self.epoch:
            if epoch < self.anchor[1]:
                raise ConfigError(
                    f"epoch {epoch} ran before the resume at step {self.anchor[0]} with "
                    "another world or batch size"
                )
            self.epoch, self.position = epoch, 0

    def consumed(self, plan: BatchPlan, plan_step: int) -> None:
        """Every rank has its batch of ``plan``'s step ``plan_step`` (skipped steps before it count
        as read)."""
        self.position = plan.position_after(plan_step + 1)

    def next_epoch(self) -> None:
        """The epoch is complete: the state now names the next one."""
        self.epoch, self.position = self.epoch + 1, 0

    def skip(self, start: int, end: int) -> None:
        """No rank delivers global steps [start, end)."""
        self.skips = self.skips.add(start, end)

    def state_dict(self) -> dict[str, Any]:
        """A small state (no sample lists): enough for a new process to continue with exactly the
        next batch."""
        s = self.settings
        state = {
            "format": STATE_FORMAT,
            "dataset": self.data.version,
            "epoch": self.epoch,
            "position": self.position,
            "step": self.step,
            "seed": s.seed,
            "shuffle": s.shuffle,
            "block_shards": s.block_shards,
            "world_size": self.world.world_size,
            "batch_size": s.batch_size,
            "drop_last": s.drop_last,
            "anchor": list(self.anchor),
            "skips": [list(r) for r in self.skips.ranges],
        }
        pack = getattr(self.data, "pack", None)
        if pack is not None:
            state["pack"] = pack.to_dict()
        if isinstance(self.data, Mix):
            state["mix"] = _mix_state(self.data, self.epoch * len(self.data) + self.position)
        else:
            state["split"] = getattr(self.data, "split", None)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: another world size, worker count or batch size finishes the
        epoch exactly once; a mix with other weights continues every source from its cursor."""
        missing = [key for key in READS if key not in state]
        if missing or state.get("format") not in (1, STATE_FORMAT):
            raise ConfigError(
                f"not a loader state of format {STATE_FORMAT} (format {state.get('format')!r}"
                + (f", missing {', '.join(missing)})" if missing else ")")
            )
        _check_pack(getattr(self.data, "pack", None), state.get("pack"))
        if isinstance(self.data, Mix):
            self.data = _resumed_mix(self.data, state)
        elif state["dataset"] != self.data.version:
            raise ConfigError(
                f"the state is for version {short_id(state['dataset'])} of the dataset, "
                "this loader "
                f"reads {short_id(self.data.version)}; open the same version (pin it "
                "with NAME@VERSION)"
            )
        # states from before splits: the whole version
        elif state.get("split") != getattr(self.data, "split", None):
            raise ConfigError(
                f"the state is for split {state.get('split')!r} of the dataset, this "
                "loader reads split "
                f"{getattr(self.data, 'split', None)!r}; open the same split (split=...)"
            )
        for key in ("seed", "shuffle", "block_shards"):
            if state[key] != getattr(self.settings, key):
                raise ConfigError(
                    f"the state was saved with {key}={state[key]!r}, this loader has "
                    f"{getattr(self.settings, key)!r}; the sample order would differ"
                )
        if not 0 <= int(state["position"]) <= len(self.data):
            raise ConfigError(
                f"state position {state['position']} is outside the epoch "
                f"({len(self.data)} samples)"
            )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        same = (state["world_size"], state["batch_size"], state.get("drop_last", True)) == (
            self.world.world_size,
            self.settings.batch_size,
            self.settings.drop_last,
        )
        if same and "anchor" in state:
            self.anchor = tuple(int(v) for v in state["anchor"])  # type: ignore[assignment]
        else:  # a new stretch of the timeline starts at the saved step
            saved = state.get("step")
            self.anchor = (int(saved) if saved is not None else 0, self.epoch, self.position)
        for start, end in state.get("skips", ()):
            self.skips = self.skips.add(int(start), int(end))


def _check_pack(pack: Any, saved: Mapping[str, Any] | None) -> None:
    """A ConfigError when the state's rows were packed otherwise (or not at all) than this
    loader's."""
    if pack is None and saved is None:
        return
    if pack is None or saved is None:
        raise ConfigError(
            "the state is for a loader "
            + ("with pack=" if saved else "without pack=")
            + ", this one reads "
            + ("packed rows" if pack else "samples")
            + "; resume with the loader the state came from"
        )
    changed = pack.differences(dict(saved))
    if changed:
        raise ConfigError(
            "the state was saved with other pack settings ("
            + "; ".join(changed)
            + "): its rows and positions mean other tokens; resume with the same pack="
        )


def _mix_state(data: Mix, stream_position: int) -> dict[str, Any]:
    cursors = data.cursors(stream_position)
    return {
        "sources": data.identity,
        "weights": dict(zip(data.names, data.weights, strict=True)),
        "epoch_samples": data.epoch_samples,
        "segment": {"start": data.segment.start, "cursors": list(data.segment.cursors)},
        "cursors": {
            n: list(divmod(c, max(len(d), 1)))
            for n, c, d in zip(data.names, cursors, data.datasets, strict=True)
        },
    }


def _resumed_mix(data: Mix, state: Mapping[str, Any]) -> Mix:
    """``data`` continued from a state of a mix: the same sources and versions, any weights."""
    saved = state.get("mix")
    if saved is None:
        raise ConfigError(
            f"the state is for one dataset (version {short_id(state['dataset'])}), this loader "
            "reads a mix; resume with the loader the state came from"
        )
    ours, theirs = data.identity, {k: list(v) for k, v in saved["sources"].items()}
    if set(ours) != set(theirs):
        added, gone = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
        raise ConfigError(
            "the state is for a mix with other sources: "
            + "; ".join(
                filter(
                    None,
                    [
                        added and f"this mix adds {', '.join(added)}",
                        gone and f"it lacks {', '.join(gone)}",
                    ],
                )
            )
        )
    for name in data.names:
        if ours[name] != theirs[name]:
            raise ConfigError(
                f"mix source {name!r}: the state is for version {short_id(theirs[name][0])}"
                f" (split {theirs[name][1]}), this mix reads {short_id(ours[name][0])} "
                f"(split {ours[name][1]}); open the same versions (pin them with NAME@VERSION)"
            )
    if int(saved["epoch_samples"]) != data.epoch_samples:
        raise ConfigError(
            f"the state's mix has epoch_samples={saved['epoch_samples']}, this one "
            f"{data.epoch_samples}; epochs would start elsewhere"
        )
    segment = Segment(
        int(saved["segment"]["start"]), tuple(int(c) for c in saved["segment"]["cursors"])
    )
    weights = dict(zip(data.names, data.weights, strict=True))
    if all(
        math.isclose(weights[n], float(saved["weights"][n]), rel_tol=1e-12, abs_tol=1e-15)
        for n in data.names
    ):
        return data.with_segment(segment)
    stream = int(state["epoch"]) * data.epoch_samples + int(state["position"])
    before = Mix(
        dict(zip(data.names, data.datasets, strict=True)),
        saved["weights"],
        data.epoch_samples,
        segment,
    )
    return before.reweighted(weights, stream)
