"""`datapipe build`: plan the source, run the passes on Dask, plan the shards, write them, commit a version."""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from datapipe.builder.cluster import dashboard_link, dask_client, worker_server
from datapipe.builder.config import LoadedPipeline
from datapipe.builder.lineage import checked_code, environment, hash_source
from datapipe.builder.passes import (
    SAMPLE_STAGE,
    BuildJob,
    Measured,
    dedupe_pass,
    duplicates_pass,
    encode_pass,
    measure_pass,
    measured_of,
    prepare_pass,
    split_pass,
    take_piece,
    write_shard_task,
)
from datapipe.builder.progress import BuildProgress
from datapipe.builder.quarantine import Reject, quarantine_bytes
from datapipe.builder.shard_plan import (
    first_occurrences,
    output_positions,
    shard_boundaries,
    shards_of,
    sizes_in_output_order,
)
from datapipe.builder.source.align import align_parts, scan_block, scans_needed
from datapipe.builder.source.base import Source
from datapipe.builder.source.planning import open_source, partition
from datapipe.errors import BuildError, ConfigError
from datapipe.formats.registry import get_format
from datapipe.storage.fs import is_local, put_atomic
from datapipe.versioning.manifest import REJECTED_NAME, Lineage, Manifest, StageCounts
from datapipe.versioning.store import LATEST, Store, VersionWriter, check_ref_name

FAILED_QUARANTINE = "rejected"  # STORE/NAME/rejected/<time>-<id>.parquet: quarantine of builds that failed


@dataclass(frozen=True)
class BuildResult:
    """A committed build: its manifest and the dataset URL that pins it."""

    manifest: Manifest
    url: str
    seconds: dict[str, float] = field(default_factory=dict)  # wall time: cluster start, each pass, total

    def summary(self) -> dict[str, Any]:
        """The JSON object `datapipe build --json` prints."""
        m = self.manifest
        return {
            "name": m.name, "version": m.version, "url": self.url, "samples": m.samples, "shards": len(m.shards),
            "bytes": m.bytes, "rejected": m.rejected_rows, "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "stages": [{"stage": s.stage, "in": s.rows_in, "out": s.rows_out, "dropped": s.dropped,
                        "rejected": s.rejected} for s in m.stages],
        }


def _in_process_only(fs: Any) -> bool:
    """memory:// lives in one process: workers must be threads to see it."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol == "memory"


class _Runner:
    """Runs one pass (a list of dask.delayed tasks) on the client, reporting progress."""

    def __init__(self, client: Any, progress: BuildProgress) -> None:
        self.client = client
        self.progress = progress
        self.seconds: dict[str, float] = {}

    def __call__(self, phase: str, tasks: Sequence[Any]) -> list[Any]:
        from distributed.client import FutureCancelledError
        from distributed.scheduler import KilledWorker

        self.progress.phase(phase, len(tasks))
        start = time.perf_counter()
        futures = self.client.compute(list(tasks))
        try:
            self._follow(phase, futures)
            results = self.client.gather(futures)
            self.seconds[phase] = time.perf_counter() - start
            return results
        except (KilledWorker, FutureCancelledError) as e:
            raise BuildError(f"{phase}: a Dask worker died while running this pass ({type(e).__name__}: {e}); "
                             "check the workers' memory limit, then run the build again") from None


    def _follow(self, phase: str, futures: list[Any]) -> None:
        """Advance the progress as tasks finish; a pass whose workers all stay paused (Dask stops a worker
        whose memory passes its pause level, and memory a task left behind may never drop back) or that has
        no worker left is a BuildError, not a build that waits for ever.

        as_completed tracks each future once; a wait(FIRST_COMPLETED) per finished task re-waited on every
        pending one (quadratic: ~5 ms a task at 200 tasks, and growing with the pass)."""
        from distributed import as_completed

        finished = as_completed(futures, loop=self.client.loop)
        stalled, quiet_since = 0, time.monotonic()
        while not finished.is_empty():
            done = finished.next_batch(block=False)
            if done:
                self.progress.advance(phase, len(done))
                stalled, quiet_since = 0, time.monotonic()
            elif time.monotonic() - quiet_since < STALL_CHECK_SECONDS:
                time.sleep(FOLLOW_POLL_SECONDS)
            else:
                quiet_since = time.monotonic()
                stalled = stalled + 1 if self._stuck() else 0
                if stalled >= STALL_CHECKS:
                    raise BuildError(f"{phase}: {self._stuck()} for {STALL_CHECKS * STALL_CHECK_SECONDS} s; give the "
                                     "workers more memory (--memory-limit, fewer --workers) or use a smaller "
                                     "source.options.blocksize, then run the build again")

    def _stuck(self) -> str | None:
        workers = self.client.scheduler_info().get("workers", {})
        if not workers:
            return "no Dask worker is left"
        if all(w.get("status") == "paused" for w in workers.values()):
            return "every Dask worker is paused at its memory limit"
        return None


STALL_CHECK_SECONDS = 20
STALL_CHECKS = 3  # a minute without progress, workers paused or gone
FOLLOW_POLL_SECONDS = 0.01  # how often a pass looks for finished tasks when none was ready


def _sum_counts(measured: Sequence[Measured], duplicates: int) -> tuple[StageCounts, ...]:
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


def _placed(plan: Source, measured: Sequence[Measured],
            rejects: Mapping[int, list[Reject]]) -> Iterator[tuple[Reject, str, int]]:
    """Each reject with its source file and 1-based row number in that file, in source order."""
    offsets: dict[int, int] = {}
    for part, m in zip(plan.parts, measured, strict=True):
        offset = offsets.get(part.file, 0)
        offsets[part.file] = offset + m.counts[0].rows_in
        for r in sorted(rejects.get(part.number, ()), key=lambda r: r.row):
            if part.members:
                yield r, plan.files[part.members[r.row]].label, 1
            else:
                yield r, plan.files[part.file].label, offset + r.row + 1


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


class _Build:
    """The state of one build between passes."""

    def __init__(self, loaded: LoadedPipeline, store: Store, run: _Runner, job: BuildJob, keep_encoded: bool) -> None:
        self.loaded, self.store, self.run, self.job = loaded, store, run, job
        self.pipeline = loaded.pipeline
        self.parts = job.source.parts
        self.masks: dict[int, list[np.ndarray]] = {}
        self.keep_encoded = keep_encoded
        self.encoded: list[Any] = []  # with keep_encoded: per partition, the persisted (Measured, block)
        # One copy of the job per worker instead of one per task (a 'files' plan lists every file).
        # Persisted as a graph literal, not scattered: the scheduler can re-create it when the
        # worker holding it dies, where lost scattered data fails the build.
        from dask import delayed

        self.job_ref = run.client.persist(delayed(job, name=f"build-job-{uuid.uuid4().hex}"))

    def masks_of(self, part: int) -> dict[int, np.ndarray]:
        return {stage: masks[part] for stage, masks in self.masks.items()}

    def dedupe(self) -> None:
        from dask import delayed

        for i, stage in enumerate(self.pipeline.stages):
            if stage.kind == "dedupe":
                hashes = self.run(f"stages[{i}].dedupe", [
                    delayed(dedupe_pass, pure=False)(self.job_ref, p, self.masks_of(p.number), i) for p in self.parts
                ])
                self.masks[i] = first_occurrences(hashes)

    def measure(self) -> tuple[list[Measured], list[np.ndarray], dict[int, list[Reject]]]:
        from dask import delayed

        if self.keep_encoded:  # the blocks stay on the workers; only their Measured halves come here
            self.encoded = self.run.client.persist([
                delayed(encode_pass, pure=False)(self.job_ref, p, self.masks_of(p.number)) for p in self.parts
            ])
            measured = self.run("clean, encode and measure", [delayed(measured_of)(e) for e in self.encoded])
        else:
            measured = self.run("clean and measure", [
                delayed(measure_pass, pure=False)(self.job_ref, p, self.masks_of(p.number)) for p in self.parts
            ])
        key_keep = first_occurrences([m.key_hashes for m in measured])
        rejects = {p.number: list(m.rejects) for p, m in zip(self.parts, measured, strict=True)}
        dup_parts = [p for p, keep in zip(self.parts, key_keep, strict=True) if not keep.all()]
        if dup_parts:
            found = self.run("duplicate keys", [
                delayed(duplicates_pass, pure=False)(self.job_ref, p, self.masks_of(p.number), key_keep[p.number])
                for p in dup_parts
            ])
            for p, dups in zip(dup_parts, found, strict=True):
                rejects[p.number].extend(dups)
        return measured, key_keep, rejects

    def quarantine(self, measured: Sequence[Measured], rejects: Mapping[int, list[Reject]]) -> bytes:
        return quarantine_bytes(_placed(self.job.source, measured, rejects))

    def check_counts(self, stages: tuple[StageCounts, ...], measured: Sequence[Measured],
                     rejects: Mapping[int, list[Reject]]) -> int:
        """Fail before writing when nothing was read, nothing is left, or too much was rejected."""
        rows_read = stages[0].rows_in
        rejected = sum(s.rejected for s in stages)
        counts = ", ".join(f"{s.stage}: {s.rows_in} in, {s.rows_out} out, {s.dropped} dropped, {s.rejected} rejected"
                           for s in stages)
        if rows_read == 0:
            files = ", ".join(f.label for f in self.job.source.files[:5])
            raise BuildError(f"source.path: no rows in {files}; the build needs at least one row")
        if rejected and rejected > self.pipeline.max_rejected * rows_read:
            path = self.store.path(self.pipeline.name, FAILED_QUARANTINE, f"{_now()}-{uuid.uuid4().hex[:8]}.parquet")
            self.store.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            put_atomic(self.store.fs, path, self.quarantine(measured, rejects))
            raise BuildError(
                f"{rejected} of {rows_read} rows rejected ({rejected / rows_read:.2%}), over max_rejected "
                f"{self.pipeline.max_rejected:.2%}; no version was made. Rejected rows with their reasons: "
                f"{path}. Counts: {counts}"
            )
        samples = stages[-1].rows_out
        if samples == 0:
            raise BuildError(f"no samples left after the stages ({counts})")
        return samples

    def write(self, writer: VersionWriter, measured: Sequence[Measured], key_keep: Sequence[np.ndarray]) -> list:
        from dask import delayed

        shards_cfg = self.pipeline.shards
        fmt = get_format(shards_cfg.format)
        sizes = [m.sizes[keep] for m, keep in zip(measured, key_keep, strict=True)]
        positions = output_positions([len(s) for s in sizes], shards_cfg.shuffle_seed)
        bounds = shard_boundaries(sizes_in_output_order(sizes, positions), shards_cfg.max_bytes,
                                  shards_cfg.max_samples, fmt.writer.end_size)
        pieces: dict[int, list[Any]] = defaultdict(list)
        for part, keep, pos in zip(self.parts, key_keep, positions, strict=True):
            if not len(pos):
                continue
            dest = shards_of(pos, bounds)
            if self.keep_encoded:
                prepared = delayed(split_pass, pure=False)(self.encoded[part.number], keep, pos, dest)
            else:
                prepared = delayed(prepare_pass, pure=False)(self.job_ref, part, self.masks_of(part.number), keep,
                                                             pos, dest)
            for shard in np.unique(dest).tolist():
                pieces[shard].append(delayed(take_piece, pure=False)(prepared, shard))
        tasks = [
            delayed(write_shard_task, pure=False)(self.store.fs, writer.partial,
                                                  writer.shard_filename(s, fmt), fmt.name, *pieces[s])
            for s in range(len(bounds) - 1)
        ]
        entries = self.run("write shards", tasks)
        self.encoded = []  # frees the blocks on the workers
        return entries


def build(
    loaded: LoadedPipeline,
    store: Store,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    tags: Iterable[str] = (),
    client: Any = None,
    progress: BuildProgress | None = None,
    storage_options: Mapping[str, Any] | None = None,
    keep_encoded: bool | None = None,
    memory_limit: int | None = None,
    scheduler_timeout: float | None = None,
) -> BuildResult:
    """Build ``loaded`` into a new version of ``store`` and point 'latest' (and ``tags``) at it.

    ``client`` reuses an existing distributed Client (tests, notebooks); otherwise ``scheduler``
    names a running Dask scheduler, or a LocalCluster of ``workers`` processes is started.
    ``keep_encoded``: whether the workers hold the encoded samples between the measure and the
    write pass instead of reading the source twice; by default, when they fit (``fits_in_memory``).
    The result is the same either way. ``memory_limit``: bytes per worker of the embedded
    LocalCluster (Dask's default otherwise: the machine's memory shared among the workers).
    ``scheduler_timeout``: seconds to keep trying to reach ``scheduler`` (cluster.SCHEDULER_TIMEOUT).
    """
    started = time.perf_counter()
    pipeline = loaded.pipeline
    tags = [check_ref_name(t) for t in tags]
    check_store_location(store)
    progress = progress or BuildProgress()
    # the embedded cluster's workers import what they need while this process plans
    with worker_server(enabled=client is None and scheduler is None and not _in_process_only(store.fs)):
        opened = open_source(pipeline.source, loaded.base_dir, storage_options)
        code = checked_code(loaded)
        processes = not (_in_process_only(store.fs) or _in_process_only(opened.fs))
        scope = contextlib.nullcontext(client) if client is not None else dask_client(
            workers, scheduler, processes=processes, memory_limit=memory_limit, scheduler_timeout=scheduler_timeout)
        with scope as c:
            progress.dashboard(dashboard_link(c))
            run = _Runner(c, progress)
            run.seconds["start"] = time.perf_counter() - started  # planning the source and starting the cluster
            plan = _align(run, partition(opened, fitted_blocksize(opened, worker_memory_limits(c))))
            check_file_sizes(plan, worker_memory_limits(c))
            job = BuildJob(pipeline, loaded.base_dir, plan, {ref.module: ref.sha256 for ref in code})
            source_files = c.compute([_hash_task(plan.fs, f) for f in plan.files])
            keep = fits_in_memory(c, plan) if keep_encoded is None else keep_encoded
            b = _Build(loaded, store, run, job, keep)
            b.dedupe()
            measured, key_keep, rejects = b.measure()
            stages = _sum_counts(measured, sum(int((~k).sum()) for k in key_keep))
            b.check_counts(stages, measured, rejects)
            writer = store.begin(pipeline.name)
            try:
                entries = b.write(writer, measured, key_keep)
                rejected = sum(s.rejected for s in stages)
                if rejected:
                    put_atomic(store.fs, f"{writer.partial}/{REJECTED_NAME}", b.quarantine(measured, rejects))
                kinds: dict[str, set[str]] = defaultdict(set)
                for m in measured:
                    for name, k in m.kinds.items():
                        kinds[name] |= k
                manifest = Manifest(
                    name=pipeline.name, shard_format=get_format(pipeline.shards.format).name,
                    fields={name: "|".join(sorted(kinds[name])) for name in sorted(kinds)},
                    shards=tuple(entries), stages=stages,
                    lineage=Lineage(pipeline=pipeline.canonical(), sources=tuple(c.gather(source_files)), code=code,
                                    seed=pipeline.shards.shuffle_seed, environment=environment()),
                    rejected=REJECTED_NAME if rejected else None, rejected_rows=rejected,
                )
                committed = writer.commit(manifest, (LATEST, *tags))
            except BaseException:
                writer.abort()
                raise
    return BuildResult(committed, f"{store.url.rstrip('/')}/{pipeline.name}@{committed.version}",
                       {**run.seconds, "total": time.perf_counter() - started})


KEEP_FRACTION = 0.25  # of the workers' memory that encoded samples may take between passes
ENCODED_PER_SOURCE_BYTE = 4  # a guess on the safe side: tar framing and decompressed Parquet


def worker_memory_limits(client: Any) -> list[int]:
    """Each worker's memory limit in bytes (0 where a worker has none)."""
    return [w.get("memory_limit") or 0 for w in client.scheduler_info().get("workers", {}).values()]


FILE_COPIES = 3  # a 'files' sample is in memory as read, as its encoded payload, and in its partition's block


def check_file_sizes(plan: Source, limits: Sequence[int]) -> None:
    """A 'files' source whose largest file cannot be held (FILE_COPIES times) by a worker fails before any
    pass runs, naming the file: each file is one sample, read whole into its worker's memory."""
    known = [m for m in limits if m]
    if plan.format != "files" or not known or len(known) != len(limits):
        return
    biggest = max(plan.files, key=lambda f: f.size)
    if FILE_COPIES * biggest.size > min(known):
        raise BuildError(f"{biggest.label}: {biggest.size} bytes, one sample read whole into a worker's memory "
                         f"({FILE_COPIES}x while it is encoded); a worker has {min(known)} bytes. Give the workers "
                         "more memory (--memory-limit, or fewer --workers) or split the file")


TARGET_FRACTION = 0.6  # Dask spills at 70% of a worker's memory limit, pauses it at 80%, restarts it at 95%
WORKER_BASELINE = 160 << 20  # a worker's memory once it imported the build's stack (pandas, pyarrow, datapipe)
# a partition's peak in a worker per source byte: frame, encoded fields, encoded block, allocator slack
# (8 MB of CSV measured ~150 MB; 8x let a 400 MB worker die in a clean-clone run)
PARTITION_EXPANSION = 20
MIN_BLOCKSIZE = 1 << 20


def fitting_blocksize(limits: Sequence[int]) -> int | None:
    """The largest blocksize whose partitions a worker of the smallest limit holds while it measures or encodes
    one, well below the level where Dask pauses it; None when a worker has no limit."""
    known = [m for m in limits if m]
    if not known or len(known) != len(limits):
        return None
    return max(MIN_BLOCKSIZE, int((TARGET_FRACTION * min(known) - WORKER_BASELINE) // PARTITION_EXPANSION))


def fitted_blocksize(source: Source, limits: Sequence[int]) -> int:
    """The configured blocksize, or a smaller one where its partitions would not fit the workers' memory
    (an execution setting: the version is the same at any blocksize); Parquet row groups stay whole."""
    fitting = fitting_blocksize(limits)
    if fitting is None or source.format == "parquet" or fitting >= source.blocksize:
        return source.blocksize
    logging.getLogger("datapipe.builder").info("blocksize %d: partitions a worker of %d bytes can hold",
                                               fitting, min(limits))
    return fitting


def fits_in_memory(client: Any, plan: Source) -> bool:
    """Whether the encoded dataset (guessed from the source's size) fits in KEEP_FRACTION of the workers' memory.

    Larger inputs stream: the write pass reads and cleans each partition again instead.
    """
    limits = worker_memory_limits(client)
    if not limits or 0 in limits:  # no limit known: do not guess
        return False
    return ENCODED_PER_SOURCE_BYTE * sum(f.size for f in plan.files) <= KEEP_FRACTION * sum(limits)


def check_store_location(store: Store) -> None:
    """A store that is a file (or under one) is a ConfigError before anything runs, not an OSError after it."""
    if is_local(store.fs):
        path = os.path.abspath(store.root)
        while not os.path.exists(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)
        if os.path.exists(path) and not os.path.isdir(path):
            what = "is a file" if path == os.path.abspath(store.root) else f"is under a file ({path})"
            raise ConfigError(f"{store.url}: the store {what}, not a directory; give a directory for the store "
                              "(it is created when missing)")
    elif store.fs.isfile(store.root):
        raise ConfigError(f"{store.url}: the store is a file, not a directory; give a directory for the store")


def _align(run: _Runner, plan: Source) -> Source:
    """Cut quoted CSV files between records: one quote-counting task per nominal block (``align_parts``)."""
    needed = scans_needed(plan)
    if not needed:
        return plan
    from dask import delayed

    scans = run("find record boundaries", [
        delayed(scan_block, pure=False)(plan.fs, plan.files[i].path, p.start, p.length, plan.quote)
        for i, p in needed
    ])
    return align_parts(plan, scans)


def _hash_task(fs: Any, f: Any) -> Any:
    from dask import delayed

    return delayed(hash_source, pure=False)(fs, f)
