"""What a Dask task does to one partition in each pass of a build.

Passes recompute from the source instead of holding the data, so inputs larger than the
cluster's memory stream through: one pass per dedupe stage (row hashes), a measure pass (counts,
rejects, encoded sizes, key hashes), and a write pass (samples split by destination shard).
Every pass runs the same deterministic code, so a row meets the same fate in each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from datapipe.builder.allocator import fit_worker_thresholds
from datapipe.builder.config import Pipeline, stage_path
from datapipe.builder.drops import dropped_examples
from datapipe.builder.encode import EncodedRows, SampleEncoder, encode_columns
from datapipe.builder.map_failure import located
from datapipe.builder.quarantine import Reject, row_json
from datapipe.builder.reject_data import DUPLICATES, MEASURED, RejectsAt
from datapipe.builder.source.base import Part, Source
from datapipe.builder.source.registry import read_part
from datapipe.builder.splits import assign_splits
from datapipe.builder.stages import dedupe_hashes, run_stage
from datapipe.builder.token_origins import from_first_row, origins
from datapipe.builder.tokenize_stage import TokenizerFile
from datapipe.errors import BuildError, ConfigError, UserCodeError, did_you_mean
from datapipe.formats.encoded import EncodedSamples, in_output_order
from datapipe.formats.registry import get_format
from datapipe.versioning.manifest import ShardEntry, StageCounts
from datapipe.versioning.writer import write_shard_unless_stored

SAMPLE_STAGE = "sample"
SOURCE_STAGE = "source"

Masks = Mapping[int, np.ndarray]  # stage number -> keep-mask of the rows reaching that dedupe
# the output positions of a partition's samples for one shard, encoded
Piece = tuple[np.ndarray, EncodedSamples]


@dataclass(frozen=True)
class BuildJob:
    """The picklable description of a build that every task receives."""

    pipeline: Pipeline
    base_dir: str
    source: Source
    # module of a map stage -> sha256 of its file
    code: dict[str, str] = field(default_factory=dict)
    where: str = "the pipeline file"  # FILE:LINE of the splits section, for messages
    tokenizer: TokenizerFile | None = None  # the tokenize stage's file

    def encoder(self) -> SampleEncoder:
        """The sample encoder for this pipeline's fields and shard format."""
        fmt = get_format(self.pipeline.shards.format)
        return SampleEncoder(
            self.pipeline.sample.key,
            self.pipeline.sample.fields,
            numeric=fmt.name == "tfrecord",
            allow_dots_in_keys=fmt.writer.allow_dots_in_keys,
            arrays=fmt.writer.required_fields,
        )

    def encode_block(self, part: Part, encoded: EncodedRows) -> EncodedSamples:
        """``encoded`` in the shard format's blocks; token shards' documents table names the
        source file and row each document came from (``token_origins``)."""
        fields: Mapping[str, Sequence[Any]] = encoded.fields
        if self.pipeline.shards.format == "tokens":
            fields = {**fields, **origins(self.source, part, encoded.rows)}
        writer = get_format(self.pipeline.shards.format).writer
        return writer.encode_samples(encoded.keys, fields)


@dataclass
class Cleaned:
    """A partition after the stages: its frame, per-stage counts and rejects; where its rows start
    (``RawPart.lines``, ``RawPart.newlines``)."""

    frame: pd.DataFrame
    counts: list[StageCounts]
    rejects: list[Reject]
    dropped: list[Reject] = field(default_factory=list)  # a few rows each stage dropped
    lines: np.ndarray | None = None
    newlines: int | None = None

    def located(self, rejects: Iterable[Reject]) -> list[Reject]:
        """``rejects`` with the line each row starts on in the partition, where it is known."""
        if self.lines is None:
            return list(rejects)
        return [replace(r, line=int(self.lines[r.row])) for r in rejects]


@dataclass
class Measured:
    """The measure pass's report on one partition: small enough to gather on the client."""

    counts: list[StageCounts]
    rejects: list[Reject]
    sizes: np.ndarray
    key_hashes: np.ndarray
    kinds: dict[str, set[str]] = field(default_factory=dict)
    # with a splits section: each sample's split number (split_names order)
    splits: np.ndarray | None = None
    # each sample's field bytes, what its encoded size holds (None: a state saved without them)
    payloads: np.ndarray | None = None
    # the first rows each stage dropped (drops.DROP_EXAMPLES), for the summary's warnings
    dropped: list[Reject] = field(default_factory=list)
    # newline bytes in the partition (text sources): where the next one of its file starts
    newlines: int | None = None


def clean(job: BuildJob, part: Part, masks: Masks, until: int | None = None) -> Cleaned:
    """Read ``part`` and run the stages before ``until`` (all of them when None)."""
    fit_worker_thresholds()
    raw = read_part(job.source, part)
    frame = raw.frame
    rejects = [Reject(SOURCE_STAGE, reason, row, data) for row, reason, data in raw.rejects]
    counts = [StageCounts(SOURCE_STAGE, raw.rows_in, len(frame), 0, len(rejects))]
    dropped: list[Reject] = []
    for i, stage in enumerate(job.pipeline.stages):
        if i == until:
            break
        label = stage_path(i, stage.kind)
        try:
            outcome = run_stage(
                stage, label, frame, job.base_dir, masks.get(i), job.code, job.tokenizer
            )
        except UserCodeError as e:
            raise located(e, job.source, part, frame) from None
        counts.append(
            StageCounts(
                label, len(frame), len(outcome.frame), outcome.dropped, len(outcome.rejected)
            )
        )
        rejects.extend(outcome.rejected)
        if outcome.dropped:
            dropped.extend(dropped_examples(label, frame, outcome.frame, outcome.rejected))
        frame = outcome.frame
    return Cleaned(frame, counts, rejects, dropped, raw.lines, raw.newlines)


def dedupe_pass(job: BuildJob, part: Part, masks: Masks, stage: int) -> np.ndarray:
    """Hashes of the dedupe columns of the rows that reach stage ``stage``."""
    cleaned = clean(job, part, masks, until=stage)
    args = job.pipeline.stages[stage].args
    return dedupe_hashes(cleaned.frame, args.columns, stage_path(stage, "dedupe"))


def _sample_columns(job: BuildJob, frame: pd.DataFrame, encoder: SampleEncoder) -> list[str]:
    missing = [c for c in encoder.columns if c not in frame.columns]
    if missing and len(frame):
        sample = job.pipeline.sample
        places = ["sample.key"] if sample.key in missing else []
        places += [
            f"sample.fields.{name}"
            for name, columns in sample.fields.items()
            if set([columns] if isinstance(columns, str) else columns) & set(missing)
        ]
        raise ConfigError(
            f"{', '.join(places) or 'sample.fields'}: no column {', '.join(map(repr, missing))} "
            f"after the stages{did_you_mean(missing, frame.columns)} "
            f"(columns: {', '.join(map(str, frame.columns))})"
        )
    return encoder.columns


def encode_rows(job: BuildJob, frame: pd.DataFrame) -> tuple[EncodedRows, list[Reject]]:
    """Every row that encodes (column-wise), and a reject for every row that does not."""
    encoder = job.encoder()
    _sample_columns(job, frame, encoder)
    encoded = encode_columns(encoder, frame)
    rejects = [
        Reject(SAMPLE_STAGE, reason, int(row), row_json(frame, row))
        for row, reason in encoded.rejects.items()
    ]
    return encoded, rejects


def key_hashes(keys: Sequence[str]) -> np.ndarray:
    """128-bit hashes of sample keys, (n, 2) uint64."""
    if not keys:
        return np.zeros((0, 2), dtype=np.uint64)
    series = pd.Series(list(keys), dtype=object)
    a = pd.util.hash_pandas_object(series, index=False, hash_key="datapipe-keys-01").to_numpy()
    b = pd.util.hash_pandas_object(series, index=False, hash_key="datapipe-keys-02").to_numpy()
    return np.stack([a, b], axis=1).astype(np.uint64)


def measure_pass(job: BuildJob, part: Part, masks: Masks) -> Measured:
    """Counts, rejects, encoded size and key hash of every sample of ``part``."""
    cleaned = clean(job, part, masks)
    encoded, rejects = encode_rows(job, cleaned.frame)
    sizes = get_format(job.pipeline.shards.format).writer.sample_sizes(encoded.keys, encoded.fields)
    return _measured(job, cleaned, encoded, rejects, sizes)


def field_bytes(encoded: EncodedRows) -> np.ndarray:
    """Each encoded sample's bytes of field values, before the shard format adds its own (a number
    kept as a number, for TFRecord, counts 8)."""
    total = np.zeros(len(encoded.keys), dtype=np.int64)
    for payloads in encoded.fields.values():
        sizes = (8 if isinstance(p, int | float) else memoryview(p).nbytes for p in payloads)
        total += np.fromiter(sizes, np.int64, len(total))
    return total


def _measured(
    job: BuildJob, cleaned: Cleaned, encoded: EncodedRows, rejects: list[Reject], sizes: np.ndarray
) -> Measured:
    counts = [
        *cleaned.counts,
        StageCounts(SAMPLE_STAGE, len(cleaned.frame), len(encoded.keys), 0, len(rejects)),
    ]
    return Measured(
        counts,
        cleaned.located(cleaned.rejects + rejects),
        sizes,
        key_hashes(encoded.keys),
        encoded.kinds,
        sample_splits(job, cleaned.frame, encoded),
        field_bytes(encoded),
        cleaned.located(cleaned.dropped),
        cleaned.newlines,
    )


def sample_splits(job: BuildJob, frame: pd.DataFrame, encoded: EncodedRows) -> np.ndarray | None:
    """The split number of each encoded sample, from its ``splits.by`` value (default: its key);
    None without a splits section."""
    splits = job.pipeline.splits
    if splits is None:
        return None
    if splits.by is None:
        return assign_splits(encoded.keys, splits.fractions, splits.seed)
    if splits.by not in frame.columns:
        if not len(frame):
            return np.zeros(0, dtype=np.int8)
        raise ConfigError(
            f"{job.where}: splits.by: no column {splits.by!r} after the stages"
            f"{did_you_mean([splits.by], frame.columns)} (columns: "
            f"{', '.join(map(str, frame.columns))}); name one of them, or leave 'by' out to "
            "split by the sample key"
        )
    return assign_splits(frame[splits.by].loc[encoded.rows], splits.fractions, splits.seed)


def encode_pass(job: BuildJob, part: Part, masks: Masks) -> tuple[Measured, EncodedSamples]:
    """The measure pass that also keeps every sample of ``part`` encoded, so that the write pass
    does not read and clean the source again (used when the encoded dataset fits in memory)."""
    cleaned = clean(job, part, masks)
    encoded, rejects = encode_rows(job, cleaned.frame)
    block = job.encode_block(part, encoded)
    return _measured(job, cleaned, encoded, rejects, np.diff(block.bounds)), block


def measure_leaving(job: BuildJob, part: Part, masks: Masks, at: RejectsAt) -> Measured:
    """``measure_pass``, its rejects' data left ``at`` its place (``reject_data``)."""
    measured = measure_pass(job, part, masks)
    return replace(measured, rejects=at.kept(MEASURED, part.number, measured.rejects))


def encode_leaving(
    job: BuildJob, part: Part, masks: Masks, at: RejectsAt
) -> tuple[Measured, EncodedSamples]:
    """``encode_pass``, its rejects' data left ``at`` its place (``reject_data``)."""
    measured, block = encode_pass(job, part, masks)
    return replace(measured, rejects=at.kept(MEASURED, part.number, measured.rejects)), block


def measured_of(result: tuple[Measured, EncodedSamples]) -> Measured:
    """The small half of ``encode_pass``'s result, for the client (the block stays on its
    worker)."""
    return result[0]


def duplicates_leaving(
    job: BuildJob, part: Part, masks: Masks, key_keep: np.ndarray, at: RejectsAt
) -> list[Reject]:
    """``duplicates_pass``, its rejects' data left ``at`` its place (``reject_data``)."""
    return at.kept(DUPLICATES, part.number, duplicates_pass(job, part, masks, key_keep))


def duplicates_pass(job: BuildJob, part: Part, masks: Masks, key_keep: np.ndarray) -> list[Reject]:
    """Rejects for the samples whose key an earlier sample already has."""
    cleaned = clean(job, part, masks)
    encoded, _ = encode_rows(job, cleaned.frame)
    return cleaned.located(
        Reject(
            SAMPLE_STAGE,
            f"duplicate sample key {key!r} (the first row with this key is kept)",
            row,
            row_json(cleaned.frame, row),
        )
        for row, key, keep in zip(encoded.rows, encoded.keys, key_keep, strict=True)
        if not keep
    )


def prepare_pass(
    job: BuildJob,
    part: Part,
    masks: Masks,
    key_keep: np.ndarray,
    positions: np.ndarray,
    shards: np.ndarray,
    first_row: int = 0,
) -> dict[int, Piece]:
    """The samples of ``part``, encoded for the shard format and grouped by destination shard, with
    their output positions: blocks of bytes that cross to the shard's writer, not a dict per
    sample. ``first_row``: the partition's first row in its file."""
    cleaned = clean(job, part, masks)
    encoded, _ = encode_rows(job, cleaned.frame)
    block = from_first_row(job.encode_block(part, encoded), first_row)
    return split_block(block, key_keep, positions, shards)


def split_pass(
    result: tuple[Measured, EncodedSamples],
    key_keep: np.ndarray,
    positions: np.ndarray,
    shards: np.ndarray,
    first_row: int = 0,
) -> dict[int, Piece]:
    """``split_block`` of the block that ``encode_pass`` kept on its worker."""
    fit_worker_thresholds()
    return split_block(from_first_row(result[1], first_row), key_keep, positions, shards)


def split_block(
    block: EncodedSamples, key_keep: np.ndarray, positions: np.ndarray, shards: np.ndarray
) -> dict[int, Piece]:
    """An encoded partition's kept samples (``key_keep``) grouped by destination shard, with their
    positions."""
    keep = np.flatnonzero(key_keep)
    if len(block) != len(key_keep) or len(keep) != len(positions):
        raise BuildError(
            "the write pass saw other samples than the measure pass; stages (map functions in "
            "particular) must be deterministic"
        )
    return {
        shard: (positions[shards == shard], block.take(keep[shards == shard]))
        for shard in np.unique(shards).tolist()
    }


def take_piece(prepared: dict[int, Piece], shard: int) -> Piece | None:
    """The part of a prepared partition that goes to ``shard``."""
    return prepared.get(shard)


def write_shard_task(
    fs: Any,
    directory: str,
    filename: str,
    fmt_name: str,
    stored: AbstractSet[str],
    *pieces: Piece | None,
) -> tuple[ShardEntry, bool]:
    """Write one shard from its pieces, in output order, unless it is small and has the bytes of a
    stored shard (sha256 in ``stored``); and whether it was written."""
    fit_worker_thresholds()
    blocks = in_output_order([p for p in pieces if p is not None])
    return write_shard_unless_stored(fs, directory, filename, blocks, get_format(fmt_name), stored)
