"""`datapipe build`: the passes of a build in order, from the pipeline file to a committed version.

The passes, each a function of the values before it: the inputs found (the source listed and
sampled, the user code checked, the parent version; ``inputs``); the client started (``client``);
the source partitioned to fit the workers (``sizing``) and quoted CSV aligned (``source.align``);
each dedupe stage and the measure pass (``measure``, on the workers: ``passes``); the counts
checked (``accounting``); the shard plan (``plan``); the write pass (``write``); the commit
(``commit``). What a rebuild takes from its parent, every pass asks of one ``reuse.Reuse``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Sequence

from datapipe.builder.accounting import (
    check_counts,
    fails,
    keep_failed_quarantine,
    placed,
    sum_counts,
)
from datapipe.builder.client import open_client
from datapipe.builder.cluster import dashboard_link, worker_memory_limits, worker_peak_rss
from datapipe.builder.commit import commit, manifest_of, new_version, next_state, state_staged
from datapipe.builder.config import LoadedPipeline
from datapipe.builder.drops import DropWarning, drop_warnings, emptied_message
from datapipe.builder.execution import DEFAULT_EXECUTION, Execution
from datapipe.builder.identities import BlockDigests, Identities
from datapipe.builder.inputs import Inputs, find_inputs
from datapipe.builder.known_hashes import SourceHashes
from datapipe.builder.measure import Measure, dedupe_stages, measure_parts
from datapipe.builder.overhead import overhead
from datapipe.builder.pass_runner import PassRunner
from datapipe.builder.passes import BuildJob
from datapipe.builder.plan import plan_shards
from datapipe.builder.progress import BuildProgress
from datapipe.builder.quarantine import Placed
from datapipe.builder.reject_data import RejectsAt
from datapipe.builder.result import BuildResult, IncrementalReport
from datapipe.builder.sizing import fit_to_workers
from datapipe.builder.source.align import align_on
from datapipe.builder.source.base import Source
from datapipe.builder.source.opening import partition_source
from datapipe.builder.tokenize_stage import tokenize_memory
from datapipe.builder.write import write_shards
from datapipe.versioning.manifest import StageCounts
from datapipe.versioning.store import LATEST, Store, check_ref_name

__all__ = ["BuildResult", "Execution", "build"]


def build(
    loaded: LoadedPipeline,
    store: Store,
    *,
    tags: Iterable[str] = (),
    progress: BuildProgress | None = None,
    execution: Execution = DEFAULT_EXECUTION,
) -> BuildResult:
    """Build ``loaded`` into a new version of ``store`` and point 'latest' (and ``tags``) at it.

    ``progress`` receives the build's events (a no-op ``BuildProgress`` by default).
    ``execution`` says where the tasks run (a client, a scheduler, an embedded cluster or this
    process) and what the build may skip; the version is the same under any (``Execution``).
    """
    started = time.perf_counter()
    pipeline, refs = loaded.pipeline, (LATEST, *(check_ref_name(t) for t in tags))
    store.check_location()
    progress = progress or BuildProgress()
    with contextlib.ExitStack() as stack:
        found = find_inputs(loaded, store, execution)
        run = _start(stack, store, found, execution, progress)
        run.seconds["start"] = time.perf_counter() - started  # opening the source and the cluster
        job, blocksize, keep_encoded = _partitioned(run, loaded, found, execution)
        source = job.source
        hashes = SourceHashes(run.client, source, found.known, found.listed_ns)
        on_workers = run.share_job(job)
        blocks = BlockDigests(run.client, source, found.known, found.parent.blocks())
        identities = Identities(source.parts, hashes.all, blocks.all)
        reuse = run.timed("find parent", found.parent.reuse, store, pipeline.name, identities)
        deduped = dedupe_stages(run, on_workers, source.parts, pipeline.stages, reuse, store)
        with new_version(store, pipeline.name) as writer:  # the measure tasks leave rejects in it
            at = RejectsAt(store.fs, writer.partial)
            measured = measure_parts(
                run, on_workers, source.parts, deduped, reuse, keep_encoded, at
            )
            stages, warnings = _checked_counts(store, loaded, source, measured)
            plan = plan_shards(pipeline, measured, identities.at(deduped))
            state = next_state(found, blocksize, identities, measured, plan, hashes)
            with state_staged(writer, pipeline.name, state):
                written = write_shards(run, writer, on_workers, plan, measured, reuse)
            manifest = manifest_of(pipeline, found, written.entries, stages, measured, hashes.all())
            quarantined = _quarantine(store, source, stages, measured)
            committed = commit(writer, manifest, quarantined, refs, found.tokenizer)
        peak = worker_peak_rss(run.client)
    parts = measured.partition_counts
    report = IncrementalReport(
        reuse.parent, found.parent.why_full, hashes.report(), parts, written.counts
    )
    return BuildResult(
        committed,
        f"{store.url.rstrip('/')}/{pipeline.name}@{committed.version}",
        {**run.seconds, "total": time.perf_counter() - started},
        run.ran_on,
        peak,
        report,
        overhead(measured, committed, pipeline.shards.format),
        tuple(warnings),
        deduped.notes,
    )


def _start(
    stack: contextlib.ExitStack,
    store: Store,
    found: Inputs,
    execution: Execution,
    progress: BuildProgress,
) -> PassRunner:
    """The client ``execution`` asks for (a cluster it starts stops with ``stack``), as the runner
    of the build's passes; the link to its dashboard goes to ``progress``."""
    client, ran_on = open_client(
        stack,
        execution,
        store_fs=store.fs,
        source_fs=found.source.fs,
        source_bytes=found.source_bytes,
        unread_bytes=found.unread_bytes,
    )
    progress.dashboard(dashboard_link(client) if execution.dashboard else None)
    return PassRunner(client, progress, ran_on)


def _partitioned(
    run: PassRunner, loaded: LoadedPipeline, found: Inputs, execution: Execution
) -> tuple[BuildJob, int, bool]:
    """The job of the build: its source in partitions that the workers hold (the parent's size
    where it fits), quoted CSV aligned. And that size; whether the encoded samples stay on the
    workers between passes."""
    limits = worker_memory_limits(run.client)
    shard_bytes = loaded.pipeline.shards.max_bytes
    fit = fit_to_workers(found.source, limits, tokenize_memory(found.tokenizer), shard_bytes)
    blocksize = found.parent.blocksize(fit.blocksize, found.source.blocksize)
    source = align_on(run, partition_source(found.source, blocksize))
    where = loaded.where("splits.by")
    job = BuildJob(
        loaded.pipeline, loaded.base_dir, source, found.code_hashes, where, found.tokenizer
    )
    keep = execution.keep_encoded
    return job, blocksize, fit.keep_encoded if keep is None else keep


def _checked_counts(
    store: Store, loaded: LoadedPipeline, source: Source, measured: Measure
) -> tuple[tuple[StageCounts, ...], list[DropWarning]]:
    """Each stage's counts, checked before anything is written (``accounting.check_counts``), and
    the warnings of the stages that dropped most of their rows (the one that dropped every row
    names the emptied build); the quarantine of a build that fails there is kept for `datapipe
    rejected --failed`."""
    pipeline = loaded.pipeline
    stages = sum_counts(measured.reports, measured.duplicates)
    warnings = _drop_warnings(loaded, source, measured, stages)
    kept = None
    if fails(pipeline, stages) and any(s.rejected for s in stages):
        rejects = placed(source, measured.reports, measured.rejects)
        records = _quarantine(store, source, stages, measured)
        kept = keep_failed_quarantine(store, pipeline.name, rejects, records or ())
    check_counts(pipeline, source, stages, kept, emptied_message(warnings, loaded.shown))
    return stages, warnings


def _drop_warnings(
    loaded: LoadedPipeline, source: Source, measured: Measure, stages: Sequence[StageCounts]
) -> list[DropWarning]:
    """The stages that dropped more than half of their rows, with some of those rows."""
    counts = [(s.stage, s.rows_in, s.dropped) for s in stages]
    examples = placed(
        source,
        measured.reports,
        {p.number: m.dropped for p, m in zip(source.parts, measured.reports, strict=True)},
    )
    return drop_warnings(loaded, counts, list(examples))


def _quarantine(
    store: Store, source: Source, stages: Iterable[StageCounts], measured: Measure
) -> Iterator[Placed] | None:
    """The rows the build rejected, placed in their files, each partition's data read from where
    it is as the quarantine is written; None when it rejected none."""
    if not any(s.rejected for s in stages):
        return None
    fill = measured.data.filler(store.fs)
    return placed(source, measured.reports, measured.rejects, fill)
