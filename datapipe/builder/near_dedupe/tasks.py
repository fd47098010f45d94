"""What a Dask task does for a near_dedupe stage: a partition's signatures, a block's signatures
with its bands in the same task, a bucket's candidate pairs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from datapipe.builder.allocator import fit_worker_thresholds
from datapipe.builder.near_dedupe.lsh import band_keys, candidate_pairs
from datapipe.builder.near_dedupe.minhash import HashFamily, is_empty, signatures
from datapipe.builder.near_dedupe.resolve import numbers
from datapipe.builder.passes import BuildJob, Masks, clean
from datapipe.builder.removals import Signed, Stored
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


BANDS_META = pd.DataFrame(
    {
        "band": np.zeros(0, np.int32),
        "key": np.zeros(0, np.uint64),
        "doc": np.zeros(0, np.int64),
    }
)  # a block's bands: one row per document and band


def band_frame(signed: Signed, block: int, bands: int, rows: int) -> pd.DataFrame:
    """Every band of block ``block``'s documents (numbered ``resolve.numbers``), as rows (band,
    key, document); documents without a shingle have none."""
    sig = signed.signatures
    present = np.flatnonzero(~is_empty(sig))
    keys = band_keys(sig[present], bands, rows)
    return pd.DataFrame(
        {
            "band": np.tile(np.arange(bands, dtype=np.int32), len(present)),
            "key": keys.ravel(),
            "doc": np.repeat(numbers(block, present), bands),
        }
    )


def with_bands(
    sign: Callable[..., Signed], given: tuple[Any, ...], block: int, bands: int, rows: int
) -> tuple[Signed, pd.DataFrame]:
    """Block ``block``'s signed documents (``sign(*given)``) and their bands, in one task: the
    signatures never travel to be banded."""
    fit_worker_thresholds()  # a rebuild's first task on a worker may be this one, reading no source
    signed = sign(*given)
    return signed, band_frame(signed, block, bands, rows)


def kept(signed: Signed | Stored) -> Signed:
    """Documents signed already (the parent's, or a checked-against version's, read from its
    build state here): a ``sign`` for ``with_bands``."""
    return signed if isinstance(signed, Signed) else signed.load()


def bucket_pairs(frame: pd.DataFrame) -> pd.DataFrame:
    """One bucket's candidate pairs (``lsh.candidate_pairs``) as rows (first, second)."""
    pairs = candidate_pairs(
        frame["band"].to_numpy(), frame["key"].to_numpy(), frame["doc"].to_numpy()
    )
    return pd.DataFrame({"first": pairs[:, 0], "second": pairs[:, 1]})
