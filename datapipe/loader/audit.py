"""The audit: replay a run's schedule, resumes included, without reading a payload, and check what
it delivers.

The replay goes through the Loader's own state code (``RunState``: state_dict, then load_state_dict
under the new world), and the positions and orders the Loader reads by, so a broken schedule shows
here as it would in training. Per epoch it counts samples delivered, keys delivered more than once
(within one pass of a source, for a mix), keys never delivered (the drop_last tail, named as such)
and batches per rank; for a mix, each source's share.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from datapipe.errors import ConfigError
from datapipe.loader.mix import Mix
from datapipe.loader.run_state import RunState
from datapipe.loader.schedule import DEFAULT_BLOCK_SHARDS, BatchPlan, DropLast, runs
from datapipe.loader.settings import LoaderSettings
from datapipe.loader.shard_set import Order, ShardSet
from datapipe.loader.world import World


@dataclass(frozen=True)
class Resume:
    """The run stops before global step ``step`` and goes on with ``world_size`` ranks (and
    ``batch_size``)."""

    step: int
    world_size: int
    batch_size: int | None = None

    @classmethod
    def parse(cls, text: str) -> Resume:
        """From 'STEP:WORLD_SIZE[:BATCH_SIZE]'."""
        try:
            parts = [int(p) for p in text.split(":")]
            if len(parts) not in (2, 3) or parts[0] < 0 or min(parts[1:]) < 1:
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"--resume {text!r}: give STEP:WORLD_SIZE[:BATCH_SIZE], e.g. 120:4"
            ) from None
        return cls(*parts)


@dataclass(frozen=True)
class Violation:
    """The first delivery that breaks a property."""

    epoch: int
    step: int
    rank: int
    source: str
    key: str
    problem: str

    def __str__(self) -> str:
        return (
            f"epoch {self.epoch}, step {self.step}, rank {self.rank}: {self.source} "
            f"key {self.key!r} {self.problem}"
        )


@dataclass
class EpochAudit:
    """What one epoch delivered."""

    epoch: int
    samples: int = 0
    repeated: int = 0  # keys delivered more than once (within a pass of their source)
    # deliveries that repeat the epoch's start to fill the last global batch (drop_last='pad')
    padded: int = 0
    never: int = 0  # samples of the epoch never delivered
    never_reason: str = ""
    # (world size, batches) per stretch
    batches_per_rank: list[tuple[int, int]] = field(default_factory=list)
    shares: dict[str, float] | None = None
    # packed rows (pack=): tokens, padding share, documents whole/split/cut/never, token shares
    tokens: dict[str, Any] | None = None


@dataclass
class AuditReport:
    """Per epoch what was delivered, and the violations found (none: the schedule holds)."""

    epochs: list[EpochAudit]
    violations: list[Violation]

    @property
    def ok(self) -> bool:
        """Whether every property holds."""
        return not self.violations

    def to_dict(self) -> dict[str, Any]:
        """JSON-able."""
        return {
            "ok": self.ok,
            "epochs": [asdict(e) for e in self.epochs],
            "violations": [{**asdict(v), "message": str(v)} for v in self.violations],
        }


@dataclass(frozen=True)
class _Stretch:
    """Steps of one epoch delivered under one world: ``plan``'s steps ``steps``, global step = first
    + step."""

    plan: BatchPlan
    first: int
    steps: np.ndarray


def replay(
    data: ShardSet,
    settings: LoaderSettings,
    world_size: int,
    epochs: int,
    resumes: Sequence[Resume] = (),
) -> list[list[_Stretch]]:
    """Per epoch, the stretches a run delivers, stopping and resuming as ``resumes`` say (by their
    state dicts)."""
    run = RunState(data, settings, World(0, world_size))
    pending = sorted(resumes, key=lambda r: r.step)
    out: list[list[_Stretch]] = [[] for _ in range(epochs)]
    while run.epoch < epochs:
        plan, first = run.plan(), run.step
        kept = run.delivered()
        steps = np.arange(plan.num_batches()) if kept is None else kept
        if pending and pending[0].step < first:
            raise ConfigError(
                f"--resume at step {pending[0].step}: the run is at step {first} by then; "
                "give resumes in increasing steps"
            )
        if pending and pending[0].step < first + plan.num_batches():
            resume = pending.pop(0)
            out[run.epoch].append(_Stretch(plan, first, steps[steps < resume.step - first]))
            if resume.step > first:
                run.consumed(plan, resume.step - first - 1)
            state = run.state_dict()
            batch_size = resume.batch_size or run.settings.batch_size
            run = RunState(
                data, replace(run.settings, batch_size=batch_size), World(0, resume.world_size)
            )
            run.load_state_dict(state)
            continue
        out[run.epoch].append(_Stretch(plan, first, steps))
        run.next_epoch()
    return out


def _deliveries(data: ShardSet, order: Order, stretches: list[_Stretch]) -> dict[str, np.ndarray]:
    """Every delivery of an epoch (of ``order``) in (step, rank, sample) order: global sample id,
    step, rank, position, pad."""
    starts = np.concatenate([[0], np.cumsum(data.shard_sizes)])
    names = ("sample", "step", "rank", "position", "pad", "shard", "local")
    parts: dict[str, list[np.ndarray]] = {k: [] for k in names}
    for stretch in stretches:
        plan, steps = stretch.plan, stretch.steps
        # steps x ranks x B
        raw = np.stack([plan.raw_positions(r, steps) for r in range(plan.world_size)], axis=1)
        pad = raw >= plan.total
        positions = raw % plan.total if plan.total else raw
        shard, local = order.locate(positions.ravel())
        parts["sample"].append(starts[shard] + local)
        parts["shard"].append(shard)
        parts["local"].append(local)
        parts["step"].append(np.repeat(stretch.first + steps, plan.world_size * plan.batch_size))
        parts["rank"].append(
            np.tile(np.repeat(np.arange(plan.world_size), plan.batch_size), len(steps))
        )
        parts["position"].append(positions.ravel())
        parts["pad"].append(pad.ravel())
    empty = np.zeros(0, dtype=np.int64)
    return {k: np.concatenate(v) if v else empty for k, v in parts.items()}


def _repeats(keys: np.ndarray) -> np.ndarray:
    """Indices of the deliveries whose key came before (second and later occurrences), ascending."""
    order, bounds = runs(keys)
    again = np.ones(len(keys), dtype=bool)
    again[bounds[:-1]] = False  # the first of each run of one key
    return np.sort(order[again])


class _Auditor:
    def __init__(self, data: ShardSet, settings: LoaderSettings) -> None:
        self.data, self.settings = data, settings
        self.violations: list[Violation] = []

    def violation(self, epoch: int, d: dict[str, np.ndarray], i: int, problem: str) -> None:
        shard, local = d["shard"][i : i + 1], d["local"][i : i + 1]
        names = self.data.source_names(shard)
        source = names[0] if names is not None else getattr(self.data, "name", "dataset")
        key = str(self.data.files.keys_of(shard, local)[0])
        self.violations.append(
            Violation(epoch, int(d["step"][i]), int(d["rank"][i]), source, key, problem)
        )

    def epoch(
        self, epoch: int, stretches: list[_Stretch]
    ) -> tuple[EpochAudit, dict[str, np.ndarray]]:
        """What epoch ``epoch`` delivers in ``stretches``, checked; and its deliveries."""
        s = self.settings
        order = self.data.order(s.seed, epoch, s.shuffle, s.block_shards)
        d = _deliveries(self.data, order, stretches)
        per_rank = [(stretch.plan.world_size, len(stretch.steps)) for stretch in stretches]
        report = EpochAudit(epoch, samples=len(d["sample"]), batches_per_rank=per_rank)
        report.padded = int(d["pad"].sum())
        mixed = isinstance(self.data, Mix)
        keys = self._pass_keys(order, d, report) if mixed else d["sample"]
        real = ~d["pad"]
        repeats = _repeats(np.where(real, keys, -1 - np.arange(len(keys))))
        report.repeated = len(repeats)
        if len(repeats):
            problem = "is delivered a second time" + (" in one pass" if mixed else "")
            self.violation(epoch, d, int(repeats[0]), problem)
        last = stretches[-1].plan if stretches else BatchPlan(len(self.data), s.batch_size)
        self._check_never(epoch, order, d, report, last)
        expected_pad, planned = 0, last.num_batches() * last.global_batch
        if last.drop_last is not True:
            expected_pad = max(planned - (last.total - last.start), 0)
        if report.padded != expected_pad and not self.violations:
            self.violation(
                epoch,
                d,
                int(np.flatnonzero(d["pad"])[0]) if report.padded else 0,
                f"starts {report.padded} padded deliveries, the plan pads {expected_pad}",
            )
        return report, d

    def _pass_keys(self, order: Order, d: dict[str, np.ndarray], report: EpochAudit) -> np.ndarray:
        """A mix's deliveries keyed within a pass of each source (a source repeats across its
        passes); each source's share goes to ``report``."""
        assert isinstance(self.data, Mix)
        real = ~d["pad"]
        source, item = order.items(d["position"])
        sizes = np.array([len(ds) for ds in self.data.datasets], dtype=np.int64)
        keys = (item // sizes[source]) * (int(self.data.shard_sizes.sum()) + 1) + d["sample"]
        counts = np.bincount(source[real], minlength=len(sizes))
        report.shares = {
            n: round(float(c) / max(int(real.sum()), 1), 6)
            for n, c in zip(self.data.names, counts.tolist(), strict=True)
        }
        return keys

    def _check_never(
        self,
        epoch: int,
        order: Order,
        d: dict[str, np.ndarray],
        report: EpochAudit,
        last: BatchPlan,
    ) -> None:
        """Count what the epoch never delivers; a violation naming the first, unless the plan's
        drop (``last``: the epoch's last plan) accounts for them all."""
        mixed = isinstance(self.data, Mix)
        real = ~d["pad"]
        # a mix's epoch is positions of a stream (its sources repeat across passes); one dataset's
        # is its samples
        delivered = np.unique(d["position"][real] if mixed else d["sample"][real])
        report.never = len(self.data) - len(delivered)
        tail = 0
        if last.drop_last is True:
            tail = max(last.total - last.start - last.num_batches() * last.global_batch, 0)
        if report.never == tail and tail:
            positions = f"the last {tail} of {last.total} positions"
            report.never_reason = f"drop_last: {positions} fill no global batch"
            return
        if report.never == tail or self.violations:
            return
        missing = np.setdiff1d(np.arange(len(self.data)), delivered)[:1]
        if mixed:
            shard, local = order.locate(missing)
        else:
            starts = np.concatenate([[0], np.cumsum(self.data.shard_sizes)])
            shard = np.searchsorted(starts, missing, side="right") - 1
            local = missing - starts[shard]
        names = self.data.source_names(shard)
        source = names[0] if names else getattr(self.data, "name", "")
        count = f"{report.never} samples are not; the drop accounts for {tail}"
        problem = f"is never delivered ({count})"
        key = str(self.data.files.keys_of(shard, local)[0])
        self.violations.append(Violation(epoch, -1, -1, source, key, problem))


def audit(
    data: ShardSet,
    batch_size: int,
    world_size: int,
    seed: int = 0,
    epochs: int = 1,
    drop_last: DropLast = True,
    resumes: Iterable[Resume | str] = (),
    *,
    shuffle: bool = True,
    block_shards: int = DEFAULT_BLOCK_SHARDS,
) -> AuditReport:
    """Replay ``epochs`` epochs of a run over ``data`` (a Dataset or Mix, as a Loader reads it) and
    check them.

    ``resumes``: ``Resume(step, world_size[, batch_size])`` or 'STEP:WORLD[:BATCH]': the run stops
    before that step and goes on from its state. Where no resume changes the world or batch size,
    every batch must equal the uninterrupted run's; else every epoch must deliver each sample once
    apart from the documented drop. The report's ``violations`` name the first breach (epoch, step,
    rank, key).
    """
    if epochs < 1:
        raise ConfigError(f"epochs must be at least 1, got {epochs}")
    settings = LoaderSettings(
        batch_size=batch_size,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        block_shards=block_shards,
    )
    plan = [r if isinstance(r, Resume) else Resume.parse(r) for r in resumes]
    auditor = _Auditor(data, settings)
    run = replay(data, settings, world_size, epochs, plan)
    unchanged = all(
        (r.world_size, r.batch_size or batch_size) == (world_size, batch_size) for r in plan
    )
    straight = replay(data, settings, world_size, epochs) if plan and unchanged else None
    reports = []
    for epoch, stretches in enumerate(run):
        report, d = auditor.epoch(epoch, stretches)
        if getattr(data, "pack", None) is not None:
            from datapipe.loader.tokens.token_audit import token_report

            report.tokens = token_report(data, d["shard"], d["local"], d["pad"])
        reports.append(report)
        if straight is not None and not auditor.violations:
            base = _deliveries(
                data, data.order(seed, epoch, shuffle, block_shards), straight[epoch]
            )
            n = min(len(base["sample"]), len(d["sample"]))
            differ = np.flatnonzero(base["sample"][:n] != d["sample"][:n])
            if len(differ) or len(base["sample"]) != len(d["sample"]):
                i = int(differ[0]) if len(differ) else n - 1
                auditor.violation(
                    epoch, d, i, "differs from the uninterrupted run's delivery there"
                )
        if auditor.violations:
            break
    return AuditReport(reports, auditor.violations)
