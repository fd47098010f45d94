"""`datapipe build`: open the source, run the passes on Dask, plan the shards, write them, commit a version.

The steps, in order: the config (``LoadedPipeline``) names a source, listed and sampled once
(``source.opening.open_source``); the cluster starts; the source is partitioned to fit the
workers (``sizing``) and quoted CSV aligned (``source.align``, a pass); the passes clean,
measure and encode (``passes``, run by ``runner.PassRunner``); the shard plan places every
sample (``shard_plan``); the write pass writes the shards; versioning assembles and commits
the manifest.
"""

from __future__ import annotations

import contextlib
import datetime
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from datapipe.builder.cluster import (
    dashboard_link,
    dask_client,
    worker_memory_limits,
    worker_peak_rss,
    worker_server,
)
from datapipe.builder.config import LoadedPipeline, Pipeline
from datapipe.builder.in_process import InProcessClient, small
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
from datapipe.builder.runner import PassRunner
from datapipe.builder.shard_plan import first_occurrences, split_shard_plan
from datapipe.builder.sizing import fit_to_workers
from datapipe.builder.source.align import align_parts, scan_block, scans_needed
from datapipe.builder.source.base import Source
from datapipe.builder.source.class_folders import class_names
from datapipe.builder.source.opening import open_source, partition_source
from datapipe.builder.splits import split_names
from datapipe.errors import BuildError
from datapipe.formats.registry import get_format
from datapipe.storage.fs import put_atomic
from datapipe.versioning.manifest import (
    REJECTED_NAME,
    CodeRef,
    Lineage,
    Manifest,
    ShardEntry,
    Splits,
    StageCounts,
    assemble_manifest,
)
from datapipe.versioning.store import LATEST, Store, VersionWriter, check_ref_name

FAILED_QUARANTINE = "rejected"  # STORE/NAME/rejected/<time>-<id>.parquet: quarantine of builds that failed


@dataclass(frozen=True)
class BuildResult:
    """A committed build: its manifest and the dataset URL that pins it."""

    manifest: Manifest
    url: str
    seconds: dict[str, float] = field(default_factory=dict)  # wall time: cluster start, each pass, total
    ran_on: str = "cluster"  # "in-process" (a small source), "local cluster", "scheduler" or "client"
    worker_peak_rss: int | None = None  # bytes: the largest peak resident memory of a worker (this process in process)

    def summary(self) -> dict[str, Any]:
        """The JSON object `datapipe build --json` prints."""
        m = self.manifest
        out = {
            "name": m.name, "version": m.version, "url": self.url, "samples": m.samples, "shards": len(m.shards),
            "bytes": m.bytes, "rejected": m.rejected_rows, "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "ran_on": self.ran_on, "worker_peak_rss": self.worker_peak_rss,
            "stages": [{"stage": s.stage, "in": s.rows_in, "out": s.rows_out, "dropped": s.dropped,
                        "rejected": s.rejected} for s in m.stages],
        }
        if m.splits is not None:
            out["splits"] = dict(m.splits.samples)
        return out


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
    names a running Dask scheduler, or a LocalCluster of ``workers`` processes is started; a source under
    SMALL_BUILD_BYTES with neither ``workers``, ``scheduler`` nor ``memory_limit`` is built in this process
    (builder/in_process.py), to the same version.
    ``keep_encoded``: whether the workers hold the encoded samples between the measure and the
    write pass instead of reading the source twice; by default, when they fit (``sizing.fit_to_workers``).
    The result is the same either way. ``memory_limit``: bytes per worker of the embedded
    LocalCluster (Dask's default otherwise: the machine's memory shared among the workers).
    ``scheduler_timeout``: seconds to keep trying to reach ``scheduler`` (cluster.SCHEDULER_TIMEOUT).
    """
    started = time.perf_counter()
    pipeline = loaded.pipeline
    tags = [check_ref_name(t) for t in tags]
    store.check_location()
    progress = progress or BuildProgress()
    with contextlib.ExitStack() as stack:
        source = open_source(pipeline.source, loaded.base_dir, storage_options)
        code = checked_code(loaded)
        if client is not None:
            c, ran_on = client, "client"
        elif small(sum(f.size for f in source.files), workers, scheduler) and memory_limit is None:
            c, ran_on = InProcessClient(), "in-process"
        else:
            ran_on = "scheduler" if scheduler else "local cluster"
            # the embedded cluster's workers start from a forkserver that imports what they need meanwhile
            stack.enter_context(worker_server(enabled=scheduler is None and not _in_process_only(store.fs)))
            processes = not (_in_process_only(store.fs) or _in_process_only(source.fs))
            c = stack.enter_context(dask_client(workers, scheduler, processes=processes, memory_limit=memory_limit,
                                                scheduler_timeout=scheduler_timeout))
        progress.dashboard(dashboard_link(c))
        run = PassRunner(c, progress)
        run.seconds["start"] = time.perf_counter() - started  # opening the source and starting the cluster
        fit = fit_to_workers(source, worker_memory_limits(c))
        source = _align(run, partition_source(source, fit.blocksize))
        job = BuildJob(pipeline, loaded.base_dir, source, {ref.module: ref.sha256 for ref in code},
                       loaded.where("splits.by"))
        source_files = c.compute([_hash_task(source.fs, f) for f in source.files])
        b = _Build(store, run, job, fit.keep_encoded if keep_encoded is None else keep_encoded)
        b.dedupe()
        measured, key_keep, rejects = b.measure()
        stages = _sum_counts(measured, sum(int((~k).sum()) for k in key_keep))
        b.check_counts(stages, measured, rejects)
        committed = b.commit((LATEST, *tags), measured, key_keep, rejects, stages, code, source_files)
        peak = worker_peak_rss(c)
    return BuildResult(committed, f"{store.url.rstrip('/')}/{pipeline.name}@{committed.version}",
                       {**run.seconds, "total": time.perf_counter() - started}, ran_on, peak)


def _in_process_only(fs: Any) -> bool:
    """memory:// lives in one process: workers must be threads to see it."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol == "memory"


def _align(run: PassRunner, source: Source) -> Source:
    """Cut quoted CSV files between records: one quote-counting task per nominal block (``align_parts``)."""
    needed = scans_needed(source)
    if not needed:
        return source
    from dask import delayed

    scans = run("find record boundaries", [
        delayed(scan_block, pure=False)(source.fs, source.files[i].path, p.start, p.length, source.quote)
        for i, p in needed
    ])
    return align_parts(source, scans)


def _hash_task(fs: Any, f: Any) -> Any:
    from dask import delayed

    return delayed(hash_source, pure=False)(fs, f)


class _Build:
    """The state of one build between passes."""

    def __init__(self, store: Store, run: PassRunner, job: BuildJob, keep_encoded: bool) -> None:
        self.store, self.run, self.job = store, run, job
        self.pipeline = job.pipeline
        self.parts = job.source.parts
        self.masks: dict[int, list[np.ndarray]] = {}
        self.keep_encoded = keep_encoded
        self.encoded: list[Any] = []  # with keep_encoded: per partition, the persisted (Measured, block)
        # One copy of the job per worker instead of one per task (a 'files' source lists every file).
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

        shards_cfg, splits = self.pipeline.shards, self.pipeline.splits
        fmt = get_format(shards_cfg.format)
        sizes = [m.sizes[keep] for m, keep in zip(measured, key_keep, strict=True)]
        hashes = [m.key_hashes[keep][:, 0] for m, keep in zip(measured, key_keep, strict=True)]
        if splits is None:
            labels, names = [np.zeros(len(s), dtype=np.int8) for s in sizes], [None]
        else:
            names = split_names(splits.fractions)
            labels = [m.splits[keep] for m, keep in zip(measured, key_keep, strict=True)]
        positions, destinations, counts = split_shard_plan(
            sizes, hashes, labels, len(names), shards_cfg.shuffle_seed, shards_cfg.max_bytes, shards_cfg.max_samples,
            fmt.writer.end_size)
        files = [(name, writer.shard_filename(i, fmt, name)) for name, n in zip(names, counts, strict=True)
                 for i in range(n)]
        pieces: dict[int, list[Any]] = defaultdict(list)
        for part, keep, pos, dest in zip(self.parts, key_keep, positions, destinations, strict=True):
            if not len(pos):
                continue
            if self.keep_encoded:
                prepared = delayed(split_pass, pure=False)(self.encoded[part.number], keep, pos, dest)
            else:
                prepared = delayed(prepare_pass, pure=False)(self.job_ref, part, self.masks_of(part.number), keep,
                                                             pos, dest)
            for shard in np.unique(dest).tolist():
                pieces[shard].append(delayed(take_piece, pure=False)(prepared, shard))
        tasks = [
            delayed(write_shard_task, pure=False)(self.store.fs, writer.partial, filename, fmt.name, *pieces[s])
            for s, (_, filename) in enumerate(files)
        ]
        entries = self.run("write shards", tasks)
        self.encoded = []  # frees the blocks on the workers
        return [entry if split is None else replace(entry, split=split)
                for entry, (split, _) in zip(entries, files, strict=True)]

    def commit(self, refs: Sequence[str], measured: Sequence[Measured], key_keep: Sequence[np.ndarray],
               rejects: Mapping[int, list[Reject]], stages: tuple[StageCounts, ...], code: tuple[CodeRef, ...],
               source_files: Sequence[Any]) -> Manifest:
        """Write the shards and the quarantine into a new version and commit its manifest, pointing ``refs``
        at it; nothing is left but a partial directory for gc if any of it fails. ``source_files``: the
        futures of the source files' hashes."""
        pipeline = self.pipeline
        writer = self.store.begin(pipeline.name)
        try:
            entries = self.write(writer, measured, key_keep)
            if any(s.rejected for s in stages):
                put_atomic(self.store.fs, f"{writer.partial}/{REJECTED_NAME}", self.quarantine(measured, rejects))
            lineage = Lineage(pipeline=pipeline.canonical(), sources=tuple(self.run.client.gather(source_files)),
                              code=code, seed=pipeline.shards.shuffle_seed, environment=environment())
            manifest = assemble_manifest(pipeline.name, get_format(pipeline.shards.format).name, entries, stages,
                                         (m.kinds for m in measured), lineage, _splits(pipeline, entries),
                                         class_names(self.job.source))
            return writer.commit(manifest, refs)
        except BaseException:
            writer.abort()
            raise


def _splits(pipeline: Pipeline, entries: Sequence[ShardEntry]) -> Splits | None:
    """The manifest's splits section: the pipeline's, with the samples each split got."""
    cfg = pipeline.splits
    if cfg is None:
        return None
    samples = dict.fromkeys(split_names(cfg.fractions), 0)
    for entry in entries:
        samples[entry.split] += entry.samples
    return Splits(dict(cfg.fractions), samples, cfg.by, cfg.seed)


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


def _placed(source: Source, measured: Sequence[Measured],
            rejects: Mapping[int, list[Reject]]) -> Iterator[tuple[Reject, str, int]]:
    """Each reject with its source file and 1-based row number in that file, in source order."""
    offsets: dict[int, int] = {}
    for part, m in zip(source.parts, measured, strict=True):
        offset = offsets.get(part.file, 0)
        offsets[part.file] = offset + m.counts[0].rows_in
        for r in sorted(rejects.get(part.number, ()), key=lambda r: r.row):
            if part.members:
                yield r, source.files[part.members[r.row]].label, 1
            else:
                yield r, source.files[part.file].label, offset + r.row + 1


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
