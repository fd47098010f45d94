"""A near_dedupe stage on the cluster, top to bottom: each partition's signatures (the parent's
where it is the same partition), the versions checked against, the bands shuffled to buckets by
hash so that each bucket's pairs are found on one worker, then the clusters and removals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from datapipe.builder.config import stage_path
from datapipe.builder.config_parts import NearDedupeArgs
from datapipe.builder.near_dedupe.against import against_notes, against_shards, against_task
from datapipe.builder.near_dedupe.lsh import bands_and_rows, candidate_pairs
from datapipe.builder.near_dedupe.resolve import Documents, edges, removals
from datapipe.builder.near_dedupe.tasks import band_task, piece, signature_pass
from datapipe.builder.pass_runner import PassRunner
from datapipe.builder.passes import Masks
from datapipe.builder.removals import Removal, Signed
from datapipe.builder.source.base import Part
from datapipe.versioning.store import Store

MAX_BUCKETS = 64  # bucket tasks a stage's bands are shuffled to ...
# ... from at most as many band tasks, each of a run of blocks: pieces cost groups x buckets tasks
MAX_GROUPS = 64


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
    signed = list(known)
    todo = [i for i, s in enumerate(signed) if s is None]
    if todo:
        sign = delayed(signature_pass, pure=False)
        fresh = run(f"{label} signatures", [sign(job, parts[i], masks[i], stage) for i in todo])
        for i, s in zip(todo, fresh, strict=True):
            signed[i] = s
    against = []
    if shards:
        against = run(f"{label} against", [delayed(against_task)(s, args) for s in shards])
    docs = Documents([*against, *signed])
    pairs = run(f"{label} buckets", bucket_tasks(docs, *bands_and_rows(args)))
    pairs = np.concatenate([np.zeros((0, 2), np.int64), *pairs])
    found = edges(docs, pairs, args)
    notes = against_notes(label, args, shards, against)
    return signed, removals(docs, found, len(against)), notes


def bucket_tasks(docs: Documents, bands: int, rows: int) -> list[Any]:
    """One task per bucket: its candidate pairs, from the piece every block's bands send it."""
    from dask import delayed

    count = len(docs.blocks)
    buckets = max(1, min(MAX_BUCKETS, count))
    runs = np.linspace(0, count, min(MAX_GROUPS, count) + 1).astype(int).tolist()
    banded = [
        delayed(band_task)(docs.blocks[lo:hi], int(docs.first[lo]), bands, rows, buckets)
        for lo, hi in zip(runs[:-1], runs[1:], strict=True)
    ]
    return [
        delayed(candidate_pairs)(*[delayed(piece)(b, k) for b in banded]) for k in range(buckets)
    ]
