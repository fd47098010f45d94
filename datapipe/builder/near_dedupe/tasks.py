"""What a Dask task does for a near_dedupe stage: one partition's signatures, its bands routed to
buckets, one bucket's candidate pairs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from datapipe.builder.near_dedupe.lsh import band_keys, bucket_pieces
from datapipe.builder.near_dedupe.minhash import HashFamily, is_empty, signatures
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


def band_task(
    blocks: list[Any], first: int, bands: int, rows: int, buckets: int
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The bucket pieces (``lsh.bucket_pieces``) of consecutive blocks of documents numbered from
    ``first``; documents without a shingle have no band."""
    sig = np.concatenate([b.signatures for b in blocks]) if blocks else np.zeros((0, 1), np.uint32)
    docs = np.arange(first, first + len(sig), dtype=np.int64)
    present = ~is_empty(sig)
    return bucket_pieces(band_keys(sig[present], bands, rows), docs[present], buckets)


def piece(pieces: list[Any], bucket: int) -> Any:
    """Bucket ``bucket``'s piece of one block (a task of its own: only it crosses to the bucket's
    worker)."""
    return pieces[bucket]
