"""`datapipe build`: open the source, run the passes on Dask, plan the shards, write them, commit a
version.

The steps, in order: the config (``LoadedPipeline``) names a source, listed and sampled once
(``source.opening.open_source``); the cluster starts; the source is partitioned to fit the
workers (``sizing``) and quoted CSV aligned (``source.align``, a pass); the passes clean,
measure and encode (``passes``, run by ``runner.PassRunner``); the shard plan places every
sample (``shard_plan``); the write pass writes the shards; versioning assembles and commits
the manifest.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from datapipe.builder.accounting import check_counts, quarantine, splits_section, sum_counts
from datapipe.builder.client import open_client
from datapipe.builder.cluster import dashboard_link, worker_memory_limits, worker_peak_rss
from datapipe.builder.config import LoadedPipeline
from datapipe.builder.incremental import (
    BuildState,
    Parent,
    Reuse,
    match,
    part_identities,
    read_parent,
    save_state,
    shard_digests,
    state_key,
    with_masks,
)
from datapipe.builder.known_hashes import SourceHashes, trusted
from datapipe.builder.lineage import checked_code, environment
from datapipe.builder.passes import (
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
from datapipe.builder.quarantine import Reject
from datapipe.builder.result import BuildResult
from datapipe.builder.runner import PassRunner
from datapipe.builder.shard_plan import first_occurrences, split_shard_plan
from datapipe.builder.sizing import fit_to_workers
from datapipe.builder.source.align import align_parts, scan_block, scans_needed
from datapipe.builder.source.base import Source
from datapipe.builder.source.class_folders import class_names
from datapipe.builder.source.opening import open_source, partition_source
from datapipe.builder.splits import split_names
from datapipe.errors import DatapipeError
from datapipe.formats.registry import get_format
from datapipe.storage.fs import put_atomic
from datapipe.versioning.manifest import (
    REJECTED_NAME,
    CodeRef,
    Lineage,
    Manifest,
    ShardEntry,
    StageCounts,
    assemble_manifest,
)
from datapipe.versioning.store import LATEST, Store, VersionWriter, check_ref_name

log = logging.getLogger(__name__)


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
    rehash: bool = False,
    dashboard: bool = False,
) -> BuildResult:
    """Build ``loaded`` into a new version of ``store`` and point 'latest' (and ``tags``) at it.

    ``client`` reuses an existing distributed Client (tests, notebooks); otherwise ``scheduler``
    names a running Dask scheduler, or a LocalCluster of ``workers`` processes is started; a source
    under SMALL_BUILD_BYTES with neither ``workers``, ``scheduler`` nor ``memory_limit`` is built in
    this process (builder/in_process.py), to the same version.
    ``keep_encoded``: whether the workers hold the encoded samples between the measure and the write
    pass instead of reading the source twice; by default, when they fit (``sizing.fit_to_workers``).
    The result is the same either way. ``memory_limit``: bytes per worker of the embedded
    LocalCluster (Dask's default otherwise: the machine's memory shared among the workers).
    ``scheduler_timeout``: seconds to keep trying to reach ``scheduler``
    (cluster.SCHEDULER_TIMEOUT).
    ``rehash``: read every source file for its hash, trusting no stamp of the parent's
    (builder/known_hashes.py).
    ``dashboard``: the embedded LocalCluster serves Dask's dashboard, and the link to the dashboard
    of the cluster the build runs on goes to ``progress.dashboard`` (None without).
    """
    started, listed_ns = time.perf_counter(), time.time_ns()
    pipeline = loaded.pipeline
    tags = [check_ref_name(t) for t in tags]
    store.check_location()
    progress = progress or BuildProgress()
    with contextlib.ExitStack() as stack:
        source = open_source(pipeline.source, loaded.base_dir, storage_options)
        code = checked_code(loaded)
        code_hashes = {ref.module: ref.sha256 for ref in code}
        parent = read_parent(store, pipeline, state_key(pipeline, code_hashes, source))
        known = trusted(parent.state.sources, source.files) if parent.state and not rehash else {}
        c, ran_on = open_client(
            stack,
            client=client,
            workers=workers,
            scheduler=scheduler,
            memory_limit=memory_limit,
            scheduler_timeout=scheduler_timeout,
            store_fs=store.fs,
            source_fs=source.fs,
            source_bytes=sum(f.size for f in source.files),
            dashboard=dashboard,
            # a shuffled rebuild rewrites every shard: that is a full build's write pass, for the
            # workers asked for
            unread_bytes=None
            if parent.why_full or pipeline.shards.shuffle_seed is not None
            else sum(f.size for i, f in enumerate(source.files) if i not in known),
        )
        progress.dashboard(dashboard_link(c) if dashboard else None)
        run = PassRunner(c, progress)
        # opening the source and starting the cluster
        run.seconds["start"] = time.perf_counter() - started
        fit = fit_to_workers(source, worker_memory_limits(c))
        blocksize = parent.blocksize(fit.blocksize, source.blocksize)
        source = _align(run, partition_source(source, blocksize))
        job = BuildJob(pipeline, loaded.base_dir, source, code_hashes, loaded.where("splits.by"))
        hashes = SourceHashes(c, source, known, listed_ns)
        b = _Build(store, run, job, fit.keep_encoded if keep_encoded is None else keep_encoded, blocksize)
        looked = time.perf_counter()
        b.find_parent(parent, hashes)
        run.seconds["find parent"] = time.perf_counter() - looked
        b.dedupe()
        b.match_parent()
        measured, key_keep, rejects = b.measure()
        stages = sum_counts(measured, sum(int((~k).sum()) for k in key_keep))
        check_counts(store, pipeline, job.source, stages, measured, rejects)
        committed = b.commit((LATEST, *tags), measured, key_keep, rejects, stages, code)
        peak = worker_peak_rss(c)
    incremental = {
        "parent": b.reuse.parent if b.reuse else None,
        "full_because": parent.why_full,
        "source_files": hashes.report(),
        **b.report,
    }
    return BuildResult(
        committed,
        f"{store.url.rstrip('/')}/{pipeline.name}@{committed.version}",
        {**run.seconds, "total": time.perf_counter() - started},
        ran_on,
        peak,
        incremental,
    )


def _align(run: PassRunner, source: Source) -> Source:
    """Cut quoted CSV files between records: one quote-counting task per nominal block
    (``align_parts``)."""
    needed = scans_needed(source)
    if not needed:
        return source
    from dask import delayed

    scans = run(
        "find record boundaries",
        [
            delayed(scan_block, pure=False)(source.fs, source.files[i].path, p.start, p.length, source.quote)
            for i, p in needed
        ],
    )
    return align_parts(source, scans)


class _Plan(NamedTuple):
    """The shard plan of a build: per partition its kept rows, their output positions and shards;
    the files."""

    key_keep: list[np.ndarray]
    positions: list[np.ndarray]
    destinations: list[np.ndarray]
    files: list[tuple[str | None, str]]  # per shard: its split and file name


class _Build:
    """The state of one build between passes."""

    def __init__(self, store: Store, run: PassRunner, job: BuildJob, keep_encoded: bool, blocksize: int) -> None:
        self.store, self.run, self.job, self.blocksize = store, run, job, blocksize
        self.pipeline = job.pipeline
        self.parts = job.source.parts
        self.masks: dict[int, list[np.ndarray]] = {}
        self.keep_encoded = keep_encoded
        # with keep_encoded: partition -> the persisted (Measured, block)
        self.encoded: dict[int, Any] = {}
        # what carries over from the parent version (builder/incremental.py)
        self.reuse: Reuse | None = None
        self.hashes: SourceHashes | None = None
        self.parent: Parent | None = None
        # per partition, with its dedupe masks (incremental.with_masks)
        self.identities: list[str] = []
        self.raw_identities: list[str] = []
        self.dedupe_hashes: dict[int, list[np.ndarray]] = {}
        self.digests: list[str] = []
        self.report: dict[str, Any] = {}
        # One copy of the job per worker instead of one per task (a 'files' source lists every
        # file). Persisted as a graph literal, not scattered: the scheduler can re-create it when
        # the worker holding it dies, where lost scattered data fails the build.
        from dask import delayed

        self.job_ref = run.client.persist(delayed(job, name=f"build-job-{uuid.uuid4().hex}"))

    def masks_of(self, part: int) -> dict[int, np.ndarray]:
        return {stage: masks[part] for stage, masks in self.masks.items()}

    def find_parent(self, parent: Parent, hashes: SourceHashes) -> None:
        """Keep ``parent`` and the source hashes; what of the parent carries over is settled after
        the dedupe
        stages (``match_parent``)."""
        self.hashes, self.parent = hashes, parent
        if parent.why_full is None and parent.state is not None:
            self.raw_identities = part_identities(self.parts, hashes.all())

    def dedupe(self) -> None:
        """Each dedupe stage's masks, from every partition's row hashes: the parent's where the
        partition and
        the masks before this stage are the same, else a pass over the rest."""
        from dask import delayed

        state = self.parent.state if self.parent and self.parent.why_full is None else None
        for i, stage in enumerate(self.pipeline.stages):
            if stage.kind != "dedupe":
                continue
            known = (
                {}
                if state is None
                else {
                    p.number: state.dedupe.get(i, {}).get(identity)
                    for p, identity in zip(self.parts, self.identities_at(i), strict=True)
                }
            )
            todo = [p for p in self.parts if known.get(p.number) is None]
            fresh = (
                self.run(
                    f"stages[{i}].dedupe",
                    [delayed(dedupe_pass, pure=False)(self.job_ref, p, self.masks_of(p.number), i) for p in todo],
                )
                if todo
                else []
            )
            known.update({p.number: h for p, h in zip(todo, fresh, strict=True)})
            hashes = [known[p.number] for p in self.parts]
            self.dedupe_hashes[i] = hashes
            self.masks[i] = first_occurrences(hashes)

    def match_parent(self) -> None:
        """What of the parent this build takes (``self.reuse``): the partitions whose identity (with
        their dedupe
        masks) the parent has."""
        if not self.raw_identities or self.parent is None or self.parent.version is None:
            return
        self.identities = self.identities_at()
        entries = self.store.manifest(self.pipeline.name, self.parent.version).shards
        self.reuse = Reuse(self.parent.version, self.parent.state, entries, match(self.parent.state, self.identities))

    def identities_at(self, stage: int | None = None) -> list[str]:
        """Per partition, its identity with the masks of the dedupe stages before ``stage`` (all of
        them when
        None); the source hashes are gathered for it the first time."""
        if not self.raw_identities:
            self.raw_identities = part_identities(self.parts, self.hashes.all())
        return [
            with_masks(r, {s: m for s, m in self.masks_of(p.number).items() if stage is None or s < stage})
            for r, p in zip(self.raw_identities, self.parts, strict=True)
        ]

    def measure(self) -> tuple[list[Measured], list[np.ndarray], dict[int, list[Reject]]]:
        from dask import delayed

        carried = {p.number: self.reuse.measured(p.number) for p in self.parts} if self.reuse else {}
        todo = [p for p in self.parts if carried.get(p.number) is None]
        if not todo:  # every partition carries over
            fresh: list[Measured] = []
        # the blocks stay on the workers; only their Measured halves come here
        elif self.keep_encoded:
            blocks = self.run.client.persist(
                [delayed(encode_pass, pure=False)(self.job_ref, p, self.masks_of(p.number)) for p in todo]
            )
            self.encoded = {p.number: e for p, e in zip(todo, blocks, strict=True)}
            fresh = self.run("clean, encode and measure", [delayed(measured_of)(e) for e in blocks])
        else:
            fresh = self.run(
                "clean and measure",
                [delayed(measure_pass, pure=False)(self.job_ref, p, self.masks_of(p.number)) for p in todo],
            )
        carried.update({p.number: m for p, m in zip(todo, fresh, strict=True)})
        measured = [carried[p.number] for p in self.parts]
        self.report["partitions"] = {"measured": len(todo), "reused": len(self.parts) - len(todo)}
        key_keep = first_occurrences([m.key_hashes for m in measured])
        rejects = {p.number: list(m.rejects) for p, m in zip(self.parts, measured, strict=True)}
        kept = {p.number: self.reuse.rejects(p.number, key_keep[p.number]) for p in self.parts} if self.reuse else {}
        # duplicates included
        rejects.update({part: r for part, r in kept.items() if r is not None})
        dup_parts = [
            p for p, keep in zip(self.parts, key_keep, strict=True) if not keep.all() and kept.get(p.number) is None
        ]
        if dup_parts:
            found = self.run(
                "duplicate keys",
                [
                    delayed(duplicates_pass, pure=False)(self.job_ref, p, self.masks_of(p.number), key_keep[p.number])
                    for p in dup_parts
                ],
            )
            for p, dups in zip(dup_parts, found, strict=True):
                rejects[p.number].extend(dups)
        return measured, key_keep, rejects

    def quarantine(self, measured: Sequence[Measured], rejects: Mapping[int, list[Reject]]) -> bytes:
        return quarantine(self.job.source, measured, rejects)

    def plan(self, writer: VersionWriter, measured: Sequence[Measured], key_keep: Sequence[np.ndarray]) -> _Plan:
        """Where every kept sample goes (``shard_plan``), and each shard's digest
        (``self.digests``)."""
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
            sizes,
            hashes,
            labels,
            len(names),
            shards_cfg.shuffle_seed,
            shards_cfg.max_bytes,
            shards_cfg.max_samples,
            fmt.writer.end_size,
        )
        files = [
            (name, writer.shard_filename(i, fmt, name)) for name, n in zip(names, counts, strict=True) for i in range(n)
        ]
        self.digests = shard_digests(self.identities, key_keep, positions, destinations, len(files))
        return _Plan(list(key_keep), positions, destinations, files)

    def write(self, writer: VersionWriter, plan: _Plan) -> list[ShardEntry]:
        """The shards of ``plan``: the parent's file where it holds the same samples, else written
        by tasks."""
        from dask import delayed

        fmt, files = get_format(self.pipeline.shards.format), plan.files
        reused: dict[int, ShardEntry] = {}
        # the parent's shard of the same samples: its file, not its bytes
        for s, digest in enumerate(self.digests):
            entry = self.reuse.shard(digest) if self.reuse else None
            if entry is not None:
                reused[s] = writer.reuse_shard(self.reuse.parent, entry, files[s][1])
        pieces: dict[int, list[Any]] = defaultdict(list)
        for part, keep, pos, dest in zip(self.parts, plan.key_keep, plan.positions, plan.destinations, strict=True):
            wanted = [shard for shard in np.unique(dest).tolist() if shard not in reused]
            if not wanted:
                continue
            if part.number in self.encoded:
                prepared = delayed(split_pass, pure=False)(self.encoded[part.number], keep, pos, dest)
            else:
                prepared = delayed(prepare_pass, pure=False)(
                    self.job_ref, part, self.masks_of(part.number), keep, pos, dest
                )
            for shard in wanted:
                pieces[shard].append(delayed(take_piece, pure=False)(prepared, shard))
        written = [s for s in range(len(files)) if s not in reused]
        tasks = [
            delayed(write_shard_task, pure=False)(self.store.fs, writer.partial, files[s][1], fmt.name, *pieces[s])
            for s in written
        ]
        entries = dict(zip(written, self.run("write shards", tasks) if tasks else [], strict=True))
        self.encoded = {}  # frees the blocks on the workers
        self.report["shards"] = {
            "written": len(written),
            "reused": len(reused),
            "bytes_written": sum(entries[s].bytes for s in written),
        }
        entries.update(reused)
        return [entries[s] if split is None else replace(entries[s], split=split) for s, (split, _) in enumerate(files)]

    def commit(
        self,
        refs: Sequence[str],
        measured: Sequence[Measured],
        key_keep: Sequence[np.ndarray],
        rejects: Mapping[int, list[Reject]],
        stages: tuple[StageCounts, ...],
        code: tuple[CodeRef, ...],
    ) -> Manifest:
        """Write the shards, the quarantine and the build state into a new version and commit its
        manifest,
        pointing ``refs`` at it; nothing is left but a partial directory for gc if any of it
        fails."""
        pipeline, sources = self.pipeline, self.hashes.all()
        if not self.identities:
            self.identities = self.identities_at()
        writer = self.store.begin(pipeline.name)
        try:
            plan = self.plan(writer, measured, key_keep)
            # disk time beside the writes
            with ThreadPoolExecutor(1, thread_name_prefix="datapipe-state") as pool:
                staged = pool.submit(self.stage_state, writer, measured, key_keep, rejects)
                entries = self.write(writer, plan)
                staged.result()
            if any(s.rejected for s in stages):
                put_atomic(self.store.fs, f"{writer.partial}/{REJECTED_NAME}", self.quarantine(measured, rejects))
            lineage = Lineage(
                pipeline=pipeline.canonical(),
                sources=tuple(sources),
                code=code,
                seed=pipeline.shards.shuffle_seed,
                environment=environment(),
            )
            manifest = assemble_manifest(
                pipeline.name,
                get_format(pipeline.shards.format).name,
                entries,
                stages,
                (m.kinds for m in measured),
                lineage,
                splits_section(pipeline, entries),
                class_names(self.job.source),
            )
            return writer.commit(manifest, refs)
        except BaseException:
            writer.abort()
            raise

    def stage_state(
        self,
        writer: VersionWriter,
        measured: Sequence[Measured],
        key_keep: Sequence[np.ndarray],
        rejects: Mapping[int, list[Reject]],
    ) -> None:
        """Stage what the next build of the dataset can reuse; a failure costs only that build's
        speed."""
        state = BuildState(
            state_key(self.pipeline, self.job.code, self.job.source),
            self.identities,
            list(measured),
            [rejects[p.number] for p in self.parts],
            list(key_keep),
            self.digests,
            self.hashes.records(self.parent.records()),
            self.blocksize,
            self.job.source.blocksize,
            dedupe={
                stage: dict(zip(self.identities_at(stage), hashes, strict=True))
                for stage, hashes in self.dedupe_hashes.items()
            },
        )
        try:
            writer.put_build_state(save_state(state))
        except DatapipeError as e:
            log.warning(
                "%s: build state not saved (%s); the next build of this dataset will be a full one",
                self.pipeline.name,
                e,
            )
