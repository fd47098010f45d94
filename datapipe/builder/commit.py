"""The commit: a new version's build state, quarantine and manifest, then the version published."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from datapipe.builder.accounting import put_quarantine, splits_section
from datapipe.builder.config import Pipeline
from datapipe.builder.identities import Identities
from datapipe.builder.incremental import BuildState, write_state
from datapipe.builder.inputs import Inputs
from datapipe.builder.known_hashes import SourceHashes
from datapipe.builder.lineage import environment
from datapipe.builder.measure import Measure
from datapipe.builder.plan import ShardPlan
from datapipe.builder.quarantine import Placed
from datapipe.builder.source.class_folders import class_names
from datapipe.builder.tokenize_stage import TokenizerFile, tokenizers_version
from datapipe.errors import DatapipeError
from datapipe.formats.registry import get_format
from datapipe.versioning.manifest import (
    REJECTED_NAME,
    Lineage,
    Manifest,
    ShardEntry,
    SourceFile,
    StageCounts,
    assemble_manifest,
)
from datapipe.versioning.manifest_parts import TOKENIZER_NAME, TokenizerRef
from datapipe.versioning.store import Store, VersionWriter

log = logging.getLogger(__name__)


@contextlib.contextmanager
def new_version(store: Store, name: str) -> Iterator[VersionWriter]:
    """A new version of dataset ``name``, written in the block; if anything in it fails, nothing
    is left but a partial directory for gc."""
    writer = store.begin(name)
    try:
        yield writer
    except BaseException:
        writer.abort()
        raise


@contextlib.contextmanager
def state_staged(writer: VersionWriter, name: str, state: BuildState) -> Iterator[None]:
    """Stage ``state``, what the next build of dataset ``name`` can reuse, in ``writer``'s version
    on a thread while the block runs (its disk time beside the writes). A failure to save it costs
    only that next build's speed."""

    def stage() -> None:
        try:
            writer.put_build_state(lambda file: write_state(state, file))
        except DatapipeError as e:
            log.warning(
                "%s: build state not saved (%s); the next build of this dataset will be a full one",
                name,
                e,
            )

    with ThreadPoolExecutor(1, thread_name_prefix="datapipe-state") as pool:
        staged = pool.submit(stage)
        yield
        staged.result()


def next_state(
    found: Inputs,
    blocksize: int,
    identities: Identities,
    measure: Measure,
    plan: ShardPlan,
    hashes: SourceHashes,
) -> BuildState:
    """What the next build of the dataset can reuse of this one: its partitions (at ``blocksize``)
    with their identities, reports and rejects, its shards' digests, its source hashes."""
    dedupe = measure.dedupe
    return BuildState(
        found.key,
        identities.at(dedupe),
        list(measure.reports),
        [measure.rejects[p.number] for p in measure.parts],
        list(measure.key_keep),
        plan.digests,
        hashes.records(found.parent.records()),
        blocksize,
        found.source.blocksize,
        dedupe={
            stage: dict(zip(identities.at(dedupe, stage), stage_hashes, strict=True))
            for stage, stage_hashes in dedupe.hashes.items()
        },
        blocks=identities.blocks(),
    )


def manifest_of(
    pipeline: Pipeline,
    found: Inputs,
    entries: Sequence[ShardEntry],
    stages: tuple[StageCounts, ...],
    measure: Measure,
    sources: Sequence[SourceFile],
) -> Manifest:
    """The manifest of a version of ``entries``, with its lineage (pipeline, source files, code)."""
    lineage = Lineage(
        pipeline=pipeline.canonical(),
        sources=tuple(sources),
        code=found.code,
        seed=pipeline.shards.shuffle_seed,
        environment=environment(),
        tokenizer=tokenizer_ref(found.tokenizer) if found.tokenizer else None,
    )
    return assemble_manifest(
        pipeline.name,
        get_format(pipeline.shards.format).name,
        entries,
        stages,
        (m.kinds for m in measure.reports),
        lineage,
        splits_section(pipeline, entries),
        class_names(found.source),
    )


def tokenizer_ref(file: TokenizerFile) -> TokenizerRef:
    """The lineage's record of the tokenize stage's file, kept as TOKENIZER_NAME in the version."""
    return TokenizerRef(
        TOKENIZER_NAME,
        len(file.data),
        file.sha256,
        tokenizers_version(),
        file.vocab_size,
        file.dtype.name,
        file.eos_id,
        file.bos_id,
    )


def commit(
    writer: VersionWriter,
    manifest: Manifest,
    quarantine: Iterable[Placed] | None,
    refs: Sequence[str],
    tokenizer: TokenizerFile | None = None,
) -> Manifest:
    """Publish ``writer``'s version with its ``manifest``, ``quarantine`` (the rejects with their
    data, written as they come to rejected.parquet; None when no row was rejected) and a copy of
    ``tokenizer``'s file, and point ``refs`` at it; the committed manifest."""
    if quarantine is not None:
        put_quarantine(writer.store.fs, f"{writer.partial}/{REJECTED_NAME}", quarantine)
    if tokenizer is not None:
        writer.put_file(TOKENIZER_NAME, tokenizer.data)
    return writer.commit(manifest, refs)
