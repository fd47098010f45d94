"""What a Dask task does for a near_dedupe stage: a block's signatures (a partition, or a shard of
a version checked against) and, in the same task, its bands routed to buckets."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from datapipe.builder.near_dedupe.against import against_task
from datapipe.builder.near_dedupe.lsh import band_keys, bucket_pieces
from datapipe.builder.near_dedupe.minhash import HashFamily, is_empty, signatures
from datapipe.builder.near_dedupe.resolve import numbers
from datapipe.builder.passes import BuildJob, Masks, clean
from datapipe.builder.removals import Signed
from datapipe.builder.source.base import Part
from datapipe.errors import ConfigError, did_you_mean


def signature_pass(job: BuildJob, part: Part, masks: Masks, stage: int) -> Signed:
    """Signatures and labels of the rows of ``part`` that reach stage ``stage``."""
    cleaned = clean(job, part, masks, until=stage)
    args = job.pipeline.stages[stage].args
    frame = cleaned.frame
    if args.field not in frame.columns:
        if not len(frame):
            return Signed(np.zeros((0, args.hashes), np.uint32), np.zeros(0, str))
        raise ConfigError(
            f"stages[{stage}].near_dedupe.field: no column {args.field!r} before this stage"
            f"{did_you_mean([args.field], frame.columns)} (columns: "
            f"{', '.join(map(str, frame.columns))})"
        )
    texts = frame[args.field].tolist()
    family = HashFamily(args.seed, args.hashes)
    return Signed(signatures(texts, args.shingle, family), labels(job, part, frame))


def labels(job: BuildJob, part: Part, frame: pd.DataFrame) -> np.ndarray:
    """Each row's sample key where the key column is already there, else its file, partition and
    row there."""
    key = job.pipeline.sample.key
    if key in frame.columns:
        return np.array([str(v) for v in frame[key].tolist()], dtype=str)
    name = job.source.files[part.file].label
    return np.array(
        [f"{name} (partition {part.number}, row {int(row)})" for row in frame.index], dtype=str
    )


def banded(
    signed: Signed, block: int, bands: int, rows: int, buckets: int
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]:
    """Per bucket, the piece (``lsh.bucket_pieces``) of block ``block``'s documents (numbered
    ``resolve.numbers``); documents without a shingle have no band."""
    sig = signed.signatures
    present = np.flatnonzero(~is_empty(sig))
    keys = band_keys(sig[present], bands, rows)
    return tuple(bucket_pieces(keys, numbers(block, present), buckets))


def sign_and_band(
    job: BuildJob,
    part: Part,
    masks: Masks,
    stage: int,
    block: int,
    bands: int,
    rows: int,
    buckets: int,
) -> tuple[Any, ...]:
    """A partition's signed documents, then its piece for each bucket: one task, so that the
    signatures never travel to be banded."""
    signed = signature_pass(job, part, masks, stage)
    return (signed, *banded(signed, block, bands, rows, buckets))


def against_and_band(
    shard: Any, args: Any, block: int, bands: int, rows: int, buckets: int
) -> tuple[Any, ...]:
    """A checked-against shard's signed documents, then its piece for each bucket."""
    signed = against_task(shard, args)
    return (signed, *banded(signed, block, bands, rows, buckets))


def known_and_band(
    signed: Signed, block: int, bands: int, rows: int, buckets: int
) -> tuple[Any, ...]:
    """A partition's signed documents the parent kept, then its piece for each bucket."""
    return (signed, *banded(signed, block, bands, rows, buckets))
