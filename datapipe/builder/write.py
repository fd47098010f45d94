"""The write pass: each planned shard written by tasks, or the parent's file if the same."""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from datapipe.builder.measure import Measure
from datapipe.builder.pass_runner import PassRunner
from datapipe.builder.passes import prepare_pass, split_pass, take_piece, write_shard_task
from datapipe.builder.plan import ShardPlan
from datapipe.builder.result import ShardCounts
from datapipe.builder.reuse import Reuse
from datapipe.builder.stored import kept_once, stored_shards
from datapipe.builder.token_origins import first_rows
from datapipe.versioning.manifest import ShardEntry
from datapipe.versioning.store import VersionWriter


@dataclass(frozen=True)
class Written:
    """The shards of a new version, in manifest order, and how many were written or reused."""

    entries: list[ShardEntry]
    counts: ShardCounts


def write_shards(
    run: PassRunner,
    writer: VersionWriter,
    job: Any,
    plan: ShardPlan,
    measure: Measure,
    reuse: Reuse,
) -> Written:
    """The shards of ``plan`` in ``writer``'s version: the parent's file where it holds the same
    samples (its file, not its bytes), else written by tasks from each partition's samples (the
    encoded blocks ``measure`` kept, or the source read and cleaned again); a written shard whose
    bytes a version of the dataset already stores is then that file (``stored.kept_once``)."""
    from dask import delayed

    files = plan.files
    reused: dict[int, ShardEntry] = {}
    for s, digest in enumerate(plan.digests):
        entry = reuse.shard(digest)
        if entry is not None:
            reused[s] = writer.reuse_shard(reuse.parent, entry, files[s][1])
    todo = [s for s in range(len(files)) if s not in reused]
    # every stored shard of the dataset: one with the same bytes is that file, not a second copy
    stored = stored_shards(writer) if todo else {}
    pieces = _pieces(job, plan, measure, set(reused))
    write = delayed(write_shard_task, pure=False)
    fs, directory = writer.store.fs, writer.partial

    def tasks(shards: list[int], known: Any) -> list[Any]:
        return [write(fs, directory, files[s][1], plan.format, known, *pieces[s]) for s in shards]

    shas = frozenset(content[0] for content in stored)
    known = delayed(shas, name=f"stored-shards-{uuid.uuid4().hex}", traverse=False)
    results = dict(zip(todo, run("write shards", tasks(todo, known)) if todo else [], strict=True))
    kept, unwritten = kept_once(writer, stored, results)
    if unwritten:  # their stored files went meanwhile (a gc): written after all
        again = run("write shards", tasks(unwritten, frozenset()))
        results.update(zip(unwritten, again, strict=True))
    reused.update(kept)
    written = [s for s in todo if s not in reused]
    entries = {s: results[s][0] for s in written}
    counts = ShardCounts(len(written), len(reused), sum(entries[s].data_bytes for s in written))
    entries.update(reused)
    return Written([_in_split(entries[s], split) for s, (split, _) in enumerate(files)], counts)


def _in_split(entry: ShardEntry, split: str | None) -> ShardEntry:
    return entry if split is None else replace(entry, split=split)


def _pieces(job: Any, plan: ShardPlan, measure: Measure, reused: set[int]) -> dict[int, list[Any]]:
    """Per shard to write, the tasks that give each partition's samples for it, in partition
    order."""
    from dask import delayed

    pieces: dict[int, list[Any]] = defaultdict(list)
    starts = first_rows(measure.parts, [m.counts[0].rows_in for m in measure.reports])
    by_part = zip(
        measure.parts, measure.key_keep, plan.positions, plan.destinations, starts, strict=True
    )
    for part, keep, pos, dest, start in by_part:
        wanted = [shard for shard in np.unique(dest).tolist() if shard not in reused]
        if not wanted:
            continue
        if part.number in measure.encoded:
            block = measure.encoded[part.number]
            prepared = delayed(split_pass, pure=False)(block, keep, pos, dest, start)
        else:
            masks = measure.masks(part.number)
            prepared = delayed(prepare_pass, pure=False)(job, part, masks, keep, pos, dest, start)
        for shard in wanted:
            pieces[shard].append(delayed(take_piece, pure=False)(prepared, shard))
    return pieces
