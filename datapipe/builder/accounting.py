"""A build's accounting: stage counts summed, rejects placed in their files, the counts checked."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from datapipe.builder.config import Pipeline
from datapipe.builder.passes import SAMPLE_STAGE, Measured
from datapipe.builder.quarantine import Placed, Reject, write_quarantine
from datapipe.builder.source.base import Source
from datapipe.builder.splits import split_names
from datapipe.errors import BuildError
from datapipe.storage.fs import open_atomic
from datapipe.versioning.manifest import ShardEntry, Splits, StageCounts
from datapipe.versioning.rejected import FAILED_QUARANTINE, group_reasons, reason_lines
from datapipe.versioning.store import Store

TOP_REASONS = 3  # the reasons a build that failed over max_rejected names


# partition, its rejects -> them with their data (``reject_data.RejectData.filler``)
Fill = Callable[[int, Sequence[Reject]], Sequence[Reject]]


def put_quarantine(fs: Any, path: str, records: Iterable[Placed]) -> None:
    """The quarantine file (Parquet) of ``records`` (``placed`` with their data) at ``path``,
    written as they come."""
    with open_atomic(fs, path) as f:
        write_quarantine(f, records)


def sum_counts(measured: Sequence[Measured], duplicates: int) -> tuple[StageCounts, ...]:
    """Each stage's counts over all partitions; duplicate sample keys move from "out" to
    "rejected"."""
    totals: dict[str, list[int]] = {}
    for m in measured:
        for c in m.counts:
            t = totals.setdefault(c.stage, [0, 0, 0, 0])
            for i, v in enumerate((c.rows_in, c.rows_out, c.dropped, c.rejected)):
                t[i] += v
    if SAMPLE_STAGE in totals:
        totals[SAMPLE_STAGE][1] -= duplicates
        totals[SAMPLE_STAGE][3] += duplicates
    return tuple(StageCounts(stage, *t) for stage, t in totals.items())


def placed(
    source: Source,
    measured: Sequence[Measured],
    rejects: Mapping[int, Sequence[Reject]],
    fill: Fill | None = None,
) -> Iterator[Placed]:
    """Each reject with its source file, 1-based row number and 1-based line in that file (None
    where unknown: not a text source, or a partition before it measured by an older datapipe), in
    source order; with ``fill``, with its data, taken a partition at a time. A partition's first
    line follows the newlines of the file's partitions before it, which the measure pass
    counted."""
    rows: dict[int, int] = {}
    lines: dict[int, int | None] = {}
    for part, m in zip(source.parts, measured, strict=True):
        row, line = rows.get(part.file, 0), lines.get(part.file, 0)
        rows[part.file] = row + m.counts[0].rows_in
        lines[part.file] = None if line is None or m.newlines is None else line + m.newlines
        of_part = rejects.get(part.number, ())
        if fill is not None and of_part:
            of_part = fill(part.number, of_part)
        for r in sorted(of_part, key=lambda r: r.row):
            if part.members:
                yield r, source.files[part.members[r.row]].label, 1, None
            else:
                at = None if line is None or r.line is None else line + r.line + 1
                yield r, source.files[part.file].label, row + r.row + 1, at


def splits_section(pipeline: Pipeline, entries: Sequence[ShardEntry]) -> Splits | None:
    """The manifest's splits section: the pipeline's, with the samples each split got."""
    cfg = pipeline.splits
    if cfg is None:
        return None
    samples = dict.fromkeys(split_names(cfg.fractions), 0)
    for entry in entries:
        samples[entry.split] += entry.samples
    return Splits(dict(cfg.fractions), samples, cfg.by, cfg.seed)


def faulty(stages: tuple[StageCounts, ...]) -> int:
    """The rows the stages rejected as faulty: a near_dedupe stage's removals are quarantined to
    say why, not because anything was wrong with them."""
    return sum(s.rejected for s in stages if not s.stage.endswith(".near_dedupe"))


def over_max_rejected(pipeline: Pipeline, stages: tuple[StageCounts, ...]) -> bool:
    """Whether the stages rejected more than the pipeline's ``max_rejected`` share of the rows
    read (near-duplicates not counted: ``faulty``)."""
    rows_read, rejected = stages[0].rows_in, faulty(stages)
    return bool(rows_read and rejected and rejected > pipeline.max_rejected * rows_read)


def fails(pipeline: Pipeline, stages: tuple[StageCounts, ...]) -> bool:
    """Whether ``check_counts`` stops the build: nothing read, over ``max_rejected`` or no sample
    left."""
    return not stages[0].rows_in or over_max_rejected(pipeline, stages) or not stages[-1].rows_out


@dataclass(frozen=True)
class KeptQuarantine:
    """The quarantine of a build that failed, kept: where, and its reasons in lines to show."""

    path: str
    command: str  # the command that shows its rows
    reasons: list[str]


def keep_failed_quarantine(
    store: Store, name: str, rejects: Iterable[Placed], records: Iterable[Placed]
) -> KeptQuarantine:
    """Keep the quarantine of a build that failed, ``records`` (``rejects`` with their data),
    under STORE/NAME/rejected/TIME-ID.parquet, where `datapipe rejected STORE/NAME --failed` reads
    it."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = store.path(name, FAILED_QUARANTINE, f"{now}-{uuid.uuid4().hex[:8]}.parquet")
    store.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    put_quarantine(store.fs, path, records)
    rows = (
        {"stage": r.stage, "reason": r.reason, "source": source, "row": row, "line": line}
        for r, source, row, line in rejects
    )
    return KeptQuarantine(
        path,
        f"datapipe rejected {store.url.rstrip('/')}/{name} --failed",
        reason_lines(group_reasons(rows), TOP_REASONS),
    )


def check_counts(
    pipeline: Pipeline,
    source: Source,
    stages: tuple[StageCounts, ...],
    kept: KeptQuarantine | None = None,
    emptied: str | None = None,
) -> int:
    """The samples left; a BuildError before writing when nothing was read, too much was rejected
    (``over_max_rejected``) or nothing is left (``emptied`` says which stage dropped every row,
    when one did: ``drops.emptied_message``), naming the quarantine ``kept`` of its rejects."""
    rows_read = stages[0].rows_in
    rejected = faulty(stages)
    counts = ", ".join(
        f"{s.stage}: {s.rows_in} in, {s.rows_out} out, {s.dropped} dropped, {s.rejected} rejected"
        for s in stages
    )
    if rows_read == 0:
        files = ", ".join(f.label for f in source.files[:5])
        raise BuildError(f"source.path: no rows in {files}; the build needs at least one row")
    if over_max_rejected(pipeline, stages):
        per_stage = "\n".join(
            f"  {s.stage}: {s.rows_in} in, {s.rows_out} out, {s.dropped} dropped, "
            f"{s.rejected} rejected"
            for s in stages
        )
        reasons = "\n".join(kept.reasons) if kept else ""
        raise BuildError(
            f"{rejected} of {rows_read} rows rejected ({rejected / rows_read:.2%}), over "
            f"max_rejected {pipeline.max_rejected:.2%}; no version was made. The top reasons:\n"
            f"{reasons}\n{_see(kept)}\nRows per stage:\n{per_stage}"
        )
    samples = stages[-1].rows_out
    if samples == 0:
        emptied_by = f"{emptied}\nCounts: {counts}" if emptied else None
        raise BuildError(
            (emptied_by or f"no samples left after the stages ({counts})") + _see(kept, "\n")
        )
    return samples


def _see(kept: KeptQuarantine | None, before: str = "") -> str:
    """The line that says how to see the rejected rows of a failed build."""
    if kept is None:
        return ""
    return f"{before}Every rejected row, with its reason: `{kept.command}`\n(kept in {kept.path})"
