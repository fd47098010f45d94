"""A near_dedupe stage on the cluster, top to bottom: each block's signatures (a partition, the
parent's where it is the same partition; a shard of a version checked against) and its bands,
held on the workers; the bands shuffled to buckets by hash so that each bucket's pairs are found
on one worker; then the signatures fetched one by one, and the clusters and removals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from datapipe.builder.config import stage_path
from datapipe.builder.config_parts import NearDedupeArgs
from datapipe.builder.near_dedupe.against import against_notes, against_shards
from datapipe.builder.near_dedupe.lsh import bands_and_rows, candidate_pairs
from datapipe.builder.near_dedupe.resolve import Documents, edges, removals
from datapipe.builder.near_dedupe.tasks import against_and_band, known_and_band, sign_and_band
from datapipe.builder.pass_runner import PassRunner
from datapipe.builder.passes import Masks
from datapipe.builder.removals import Removal, Signed
from datapipe.builder.source.base import Part
from datapipe.versioning.store import Store

MAX_BUCKETS = 64  # bucket tasks a stage's bands go to (at most one per block)


def near_dedupe_stage(
    run: PassRunner,
    job: Any,
    parts: Sequence[Part],
    stage: int,
    args: NearDedupeArgs,
    masks: Sequence[Masks],
    known: Sequence[Signed | None],
    store: Store,
) -> tuple[list[Signed], list[Removal], list[str]]:
    """Per partition, its signed documents at stage ``stage`` (``args``) and its removal;
    ``masks``: each partition's masks of the stages before, ``known``: its signed documents where
    the parent had them; and a line for the summary per version checked against."""
    from dask import delayed

    label = stage_path(stage, "near_dedupe")
    shards = against_shards(label, args, store)
    bands, rows = bands_and_rows(args)
    buckets = max(1, min(MAX_BUCKETS, len(shards) + len(parts)))
    made = block_tasks(job, parts, stage, args, masks, known, shards, (bands, rows, buckets))
    held = run.keep([t[0] for t in made] + [t[k] for t in made for k in range(1, 1 + buckets)])
    signed_of, pieces = held[: len(made)], held[len(made) :]
    run(f"{label} signatures", [delayed(len)(s) for s in signed_of])  # its progress, no data
    per_bucket = [pieces[k::buckets] for k in range(buckets)]
    pairs = run(f"{label} buckets", [delayed(candidate_pairs)(*p) for p in per_bucket])
    del pieces, per_bucket, held
    blocks = run(f"{label} collect", signed_of)  # fetched one by one, each then let go
    del signed_of
    docs = Documents(blocks)
    pairs = np.concatenate([np.zeros((0, 2), np.int64), *pairs])
    found = edges(docs, pairs, args)
    against = blocks[: len(shards)]
    notes = against_notes(label, args, shards, against)
    return blocks[len(shards) :], removals(docs, found, len(shards)), notes


def block_tasks(
    job: Any,
    parts: Sequence[Part],
    stage: int,
    args: NearDedupeArgs,
    masks: Sequence[Masks],
    known: Sequence[Signed | None],
    shards: Sequence[Any],
    banding: tuple[int, int, int],
) -> list[Any]:
    """Per block (each checked-against shard, then each partition), a task of 1 + buckets
    outputs: its signed documents, then its piece for each bucket."""
    from dask import delayed

    buckets = banding[2]
    out = []
    for b, shard in enumerate(shards):
        out.append(delayed(against_and_band, nout=1 + buckets)(shard, args, b, *banding))
    for i, part in enumerate(parts):
        b = len(shards) + i
        if known[i] is not None:
            out.append(delayed(known_and_band, nout=1 + buckets)(known[i], b, *banding))
            continue
        sign = delayed(sign_and_band, nout=1 + buckets, pure=False)
        out.append(sign(job, part, masks[i], stage, b, *banding))
    return out
