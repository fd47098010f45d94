"""A near_dedupe stage on the cluster, top to bottom: each block's signatures (a partition, the
parent's where it is the same partition; a shard of a version checked against) and its bands,
held on the workers; the bands shuffled by hash (Dask's shuffle) so that each bucket's pairs are
found on one worker; the pairs' estimates made where the signatures are (``held``); then the
clusters and removals; last, the signatures fetched one at a time into a spool for the build
state (``spool``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from datapipe.builder.config import stage_path
from datapipe.builder.config_parts import NearDedupeArgs
from datapipe.builder.in_process import InProcessClient
from datapipe.builder.near_dedupe.against import AgainstShard, against_blocks, against_task
from datapipe.builder.near_dedupe.held import HeldDocuments
from datapipe.builder.near_dedupe.lsh import bands_and_rows
from datapipe.builder.near_dedupe.resolve import edges, removals
from datapipe.builder.near_dedupe.spool import Spooled, spooled
from datapipe.builder.near_dedupe.tasks import (
    BANDS_META,
    bucket_pairs,
    kept,
    signature_pass,
    with_bands,
)
from datapipe.builder.pass_runner import PassRunner
from datapipe.builder.passes import Masks
from datapipe.builder.removals import Removal, Signed, Stored
from datapipe.builder.source.base import Part
from datapipe.versioning.store import Store

MAX_BUCKETS = 64  # partitions the bands are shuffled into (at most one per block)
PAIRS_META = pd.DataFrame({"first": np.zeros(0, np.int64), "second": np.zeros(0, np.int64)})


@dataclass(frozen=True)
class StageInput:
    """What a near_dedupe stage works on: stage ``stage`` (``args``) of ``parts``, read by the
    build's ``job``; per partition, the masks of the stages before and its signed documents where
    the parent had them (``known``)."""

    job: Any
    parts: Sequence[Part]
    stage: int
    args: NearDedupeArgs
    masks: Sequence[Masks]
    known: Sequence[Signed | Stored | None]


def near_dedupe_stage(
    run: PassRunner, given: StageInput, store: Store
) -> tuple[list[Spooled], list[Removal], list[str]]:
    """Per partition, its signed documents (spooled for the build state) and its removal; and a
    line for the summary per version checked against."""
    from dask import delayed

    args = given.args
    label = stage_path(given.stage, "near_dedupe")
    against = against_blocks(label, args, store)
    made = block_tasks(given, against.blocks, bands_and_rows(args))
    held = run.keep([t[0] for t in made] + [t[1] for t in made])
    signed_of, frames = held[: len(made)], held[len(made) :]
    run(f"{label} signatures", [delayed(len)(s) for s in signed_of])  # its progress, no data
    peer_to_peer = not isinstance(run.client, InProcessClient)
    pairs = run(f"{label} buckets", shuffled_pairs(frames, peer_to_peer))
    del frames, held
    docs = HeldDocuments(run, label, signed_of)
    found = edges(docs, np.concatenate([np.zeros((0, 2), np.int64), *pairs]), args)
    checked = len(against.blocks)
    removed = removals(docs, found, checked)
    signed = run.timed(f"{label} spool", spooled, signed_of[checked:], run.fetch)
    return signed, removed, against.notes


def block_tasks(given: StageInput, against: Sequence[Any], banding: tuple[int, int]) -> list[Any]:
    """Per block (each checked against: a shard to sign or documents signed already; then each
    partition), a task of two outputs: its signed documents and its bands."""
    from dask import delayed

    task = delayed(with_bands, nout=2, pure=False)
    out = []
    for b, block in enumerate(against):
        given_as = (
            (against_task, (block, given.args))
            if isinstance(block, AgainstShard)
            else (kept, (block,))
        )
        out.append(task(*given_as, b, *banding))
    for i, part in enumerate(given.parts):
        b, known = len(against) + i, given.known[i]
        if known is not None:
            out.append(task(kept, (known,), b, *banding))
        else:
            out.append(
                task(signature_pass, (given.job, part, given.masks[i], given.stage), b, *banding)
            )
    return out


def shuffled_pairs(frames: Sequence[Any], peer_to_peer: bool) -> list[Any]:
    """The bands of every block shuffled by key (Dask's shuffle: peer to peer on a cluster, as
    tasks in process), each bucket's candidate pairs a task: one array of (first, second) per
    bucket."""
    import dask.dataframe as dd
    from dask import delayed

    if not frames:
        return []
    buckets = min(MAX_BUCKETS, len(frames))
    bands = dd.from_delayed(list(frames), meta=BANDS_META, verify_meta=False)
    method = "p2p" if peer_to_peer else "tasks"
    shuffled = bands.shuffle(on="key", npartitions=buckets, shuffle_method=method)
    pairs = shuffled.map_partitions(bucket_pairs, meta=PAIRS_META)
    return [delayed(pair_array)(part) for part in pairs.to_delayed()]


def pair_array(frame: pd.DataFrame) -> np.ndarray:
    """A bucket's pairs as an (n, 2) int64 array."""
    return frame[["first", "second"]].to_numpy(dtype=np.int64)
