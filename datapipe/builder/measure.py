"""The passes before the plan: each dedupe stage's masks, then every partition measured."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.builder.config import StageConfig
from datapipe.builder.near_dedupe.stage import StageInput, near_dedupe_stage
from datapipe.builder.pass_runner import PassRunner
from datapipe.builder.passes import (
    Measured,
    dedupe_pass,
    duplicates_leaving,
    encode_leaving,
    measure_leaving,
    measured_of,
)
from datapipe.builder.quarantine import Reject
from datapipe.builder.reject_data import DUPLICATES, MEASURED, InFile, RejectData, RejectsAt
from datapipe.builder.result import PartitionCounts
from datapipe.builder.reuse import Reuse
from datapipe.builder.shard_plan import Dedupe, first_occurrences
from datapipe.builder.source.base import Part
from datapipe.versioning.store import Store


@dataclass(frozen=True)
class Measure:
    """The passes over the source, per partition of ``parts``: its dedupe masks, its report, its
    kept keys (the first sample of each key), its rejects (duplicate keys included; without their
    data, which ``data`` says where to find) and, with keep_encoded, its encoded block held on a
    worker for the write pass."""

    parts: Sequence[Part]
    dedupe: Dedupe
    reports: list[Measured]
    key_keep: list[np.ndarray]
    rejects: Mapping[int, list[Reject]]
    encoded: Mapping[int, Any]
    fresh: int  # partitions the pass read; the others' reports are the parent's
    data: RejectData

    def masks(self, part: int) -> dict[int, np.ndarray]:
        """Partition ``part``'s dedupe masks (stage -> keep-mask)."""
        return self.dedupe.of(part)

    @property
    def partition_counts(self) -> PartitionCounts:
        """The partitions the pass read, and those whose report came from the parent."""
        return PartitionCounts(measured=self.fresh, reused=len(self.parts) - self.fresh)

    @property
    def duplicates(self) -> int:
        """The samples dropped for a key an earlier sample has."""
        return sum(int((~keep).sum()) for keep in self.key_keep)


def dedupe_stages(
    run: PassRunner,
    job: Any,
    parts: Sequence[Part],
    stages: Sequence[StageConfig],
    reuse: Reuse,
    store: Store,
) -> Dedupe:
    """Each dedupe stage's masks, from every partition's row hashes, and each near_dedupe stage's
    removals, from its signatures: the parent's where the partition and the masks before this
    stage are the same, else a pass over the rest."""
    from dask import delayed

    done = Dedupe()
    for i, stage in enumerate(stages):
        if stage.kind == "near_dedupe":
            masks = [done.of(p.number) for p in parts]
            known = [reuse.dedupe(i, p.number, m) for p, m in zip(parts, masks, strict=True)]
            given = StageInput(job, parts, i, stage.args, masks, known)
            signed, removed, notes = near_dedupe_stage(run, given, store)
            done = done.with_removals(i, signed, removed, notes)
            continue
        if stage.kind != "dedupe":
            continue
        known = {p.number: reuse.dedupe(i, p.number, done.of(p.number)) for p in parts}
        todo = [p for p in parts if known[p.number] is None]
        if todo:
            tasks = [delayed(dedupe_pass, pure=False)(job, p, done.of(p.number), i) for p in todo]
            fresh = run(f"stages[{i}].dedupe", tasks)
            known.update({p.number: h for p, h in zip(todo, fresh, strict=True)})
        done = done.then(i, [known[p.number] for p in parts])
    return done


def measure_parts(
    run: PassRunner,
    job: Any,
    parts: Sequence[Part],
    dedupe: Dedupe,
    reuse: Reuse,
    keep_encoded: bool,
    at: RejectsAt,
) -> Measure:
    """Every partition's report (the parent's where it is the same partition, else a pass over the
    rest), its kept keys and its rejects (their data left ``at`` its place). With ``keep_encoded``
    the pass keeps each partition's samples encoded on its worker; only the reports come here."""
    from dask import delayed

    carried = {p.number: reuse.measured(p.number, dedupe.of(p.number)) for p in parts}
    todo = [p for p in parts if carried[p.number] is None]
    data = RejectData()
    encoded: dict[int, Any] = {}
    if not todo:  # every partition carries over
        fresh: list[Measured] = []
    elif keep_encoded:
        encode = delayed(encode_leaving, pure=False)
        blocks = run.keep([encode(job, p, dedupe.of(p.number), at) for p in todo])
        encoded = {p.number: block for p, block in zip(todo, blocks, strict=True)}
        fresh = run("clean, encode and measure", [delayed(measured_of)(block) for block in blocks])
    else:
        measure = delayed(measure_leaving, pure=False)
        fresh = run("clean and measure", [measure(job, p, dedupe.of(p.number), at) for p in todo])
    for p, m in zip(todo, fresh, strict=True):
        if m.rejects:
            data.add(p.number, InFile(at.path(MEASURED, p.number)))
    carried.update({p.number: m for p, m in zip(todo, fresh, strict=True)})
    reports = [carried[p.number] for p in parts]
    key_keep = first_occurrences([m.key_hashes for m in reports])
    read = {p.number for p in todo}
    rejects = _with_duplicates(run, job, parts, dedupe, reuse, reports, key_keep, read, data, at)
    return Measure(parts, dedupe, reports, key_keep, rejects, encoded, len(todo), data)


def _with_duplicates(
    run: PassRunner,
    job: Any,
    parts: Sequence[Part],
    dedupe: Dedupe,
    reuse: Reuse,
    reports: Sequence[Measured],
    key_keep: Sequence[np.ndarray],
    read: set[int],
    data: RejectData,
    at: RejectsAt,
) -> dict[int, list[Reject]]:
    """Per partition, its rejects with a reject for each duplicate key: the parent's where the
    partition and its kept keys are the same, else the report's and a pass for the duplicates.
    ``data`` has the data of the reports of the partitions ``read``; the rest is added."""
    from dask import delayed

    rejects: dict[int, list[Reject]] = {}
    todo = []
    for p, m in zip(parts, reports, strict=True):
        keep = key_keep[p.number]
        kept = reuse.rejects(p.number, dedupe.of(p.number), keep)
        rejects[p.number] = list(m.rejects) if kept is None else kept
        if p.number not in read:  # the parent's report, or all its rejects: their data is its
            where = reuse.reject_data(p.number, dedupe.of(p.number), len(rejects[p.number]))
            if where is not None:
                data.add(p.number, where)
        if kept is None and not keep.all():
            todo.append(p)
    if todo:
        find = delayed(duplicates_leaving, pure=False)
        tasks = [find(job, p, dedupe.of(p.number), key_keep[p.number], at) for p in todo]
        for p, dups in zip(todo, run("duplicate keys", tasks), strict=True):
            rejects[p.number].extend(dups)
            if dups:
                data.add(p.number, InFile(at.path(DUPLICATES, p.number)))
    return rejects
