"""A pipeline's schema before it is built: the source's sample read and run through the stages here.

``datapipe schema PIPELINE`` shows each column with its type and where that type came from (the
sample it was inferred from, ``source.options.dtype``, a cast, a map), the rows each stage keeps
of the sample and what each sample field gets. It reads the sample the types are inferred from
(the first MiB of a text source, the first partition of another), not the whole source, and starts
no cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from datapipe.builder.config import LoadedPipeline, StageConfig, stage_path
from datapipe.builder.drops import stage_shown
from datapipe.builder.lineage import checked_code
from datapipe.builder.source.base import Part, Source
from datapipe.builder.source.opening import open_source, partition_source
from datapipe.builder.source.registry import read_part
from datapipe.builder.stages import dedupe_hashes, run_stage
from datapipe.builder.tokenize_stage import TokenizerFile, pipeline_tokenizer
from datapipe.errors import DatapipeError

KEY_FIELD = "__key__"  # the sample key, as the shards name it
# where a column's type came from: inferred from the sample, declared in source.options.dtype, the
# source's own (Parquet's schema, the columns of a files source), or set by a stage
INFERRED, DECLARED, SOURCE, CAST, ADDED, CHANGED = (
    "inferred",
    "declared",
    "source",
    "cast",
    "added",
    "changed",
)


@dataclass(frozen=True)
class Column:
    """A column after the stages: its type and where it came from (``origin``: one of INFERRED,
    DECLARED, SOURCE, CAST, ADDED, CHANGED; ``stage``: the stage that set it, if one did)."""

    name: str
    type: str
    origin: str
    stage: str | None = None
    was: str | None = None  # the type before the stage that cast or changed it


@dataclass(frozen=True)
class StageOnSample:
    """What one stage did to the sample: rows in and out, columns added and removed."""

    stage: str
    shown: str  # as the pipeline file states it
    rows_in: int
    rows_out: int
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


@dataclass(frozen=True)
class SchemaPreview:
    """The schema of a pipeline, from its source's sample run through its stages."""

    source: Source
    sample_file: str  # the file the sample was read from ('' when the source has none)
    rows: int  # of the sample, as read
    set_aside: int  # records of the sample that did not parse
    columns: tuple[Column, ...]
    stages: tuple[StageOnSample, ...]
    # field name -> the kinds its values took on the sample (empty: no row reached it); the key
    # is field __key__
    fields: dict[str, tuple[str, ...]] = field(default_factory=dict)
    field_columns: dict[str, tuple[str, ...]] = field(default_factory=dict)  # as sample.fields
    failed: DatapipeError | None = None  # the error of the stage that failed on the sample


def type_name(series: pd.Series) -> str:
    """The type of a column in the words of ``source.options.dtype`` and ``cast``."""
    dtype = series.dtype
    if isinstance(dtype, pd.BooleanDtype) or dtype.kind == "b":
        return "bool"
    if dtype.kind in "iuf":
        return str(dtype).lower()
    if dtype.kind == "M":
        return "datetime"
    kinds = {_value_kind(v) for v in series.dropna().tolist()}
    return kinds.pop() if len(kinds) == 1 else "object"


def _value_kind(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes | bytearray):
        return "bytes"
    if isinstance(value, np.ndarray):
        return "array"
    if type(value).__name__ == "date":
        return "date"
    return "object"


def sample_part(source: Source) -> Part:
    """The part the schema was inferred from: the sampled bytes of a text source, else the first
    partition."""
    sample = source.sample
    if sample is not None and source.format in ("csv", "jsonl"):
        file = next(i for i, f in enumerate(source.files) if f.label == sample.file)
        return Part(0, file, 0, sample.bytes, exact=True)
    parts = partition_source(source).parts
    return parts[0] if parts else Part(0, 0)


def _source_columns(source: Source, frame: pd.DataFrame, declared: set[str]) -> list[Column]:
    out = []
    for name in map(str, frame.columns):
        if name in declared:
            out.append(Column(name, source.schema[name], DECLARED))
        elif name in source.schema:
            out.append(Column(name, source.schema[name], INFERRED))
        else:
            out.append(Column(name, type_name(frame[name]), SOURCE))
    return out


def preview_schema(loaded: LoadedPipeline) -> SchemaPreview:
    """The columns, their types and origins, the stages' counts and the fields, on the sample."""
    spec = loaded.pipeline.source
    source = open_source(spec, loaded.base_dir)
    code = {ref.module: ref.sha256 for ref in checked_code(loaded)}
    tokenizer = pipeline_tokenizer(loaded)
    part = sample_part(source) if source.files else None
    raw = read_part(source, part) if part is not None else None
    frame = raw.frame if raw is not None else pd.DataFrame()
    declared = set((spec.options.get("dtype") or {}).keys())
    columns = {c.name: c for c in _source_columns(source, frame, declared)}
    steps, failed = [], None
    for i, stage in enumerate(loaded.pipeline.stages):
        label = stage_path(i, stage.kind)
        try:
            after = _run(stage, label, frame, loaded.base_dir, code, tokenizer)
        except DatapipeError as e:
            failed = e
            break
        steps.append(_step(stage, label, frame, after))
        columns = _columns_after(stage, label, columns, after)
        frame = after
    rows = raw.rows_in if raw is not None else 0
    return SchemaPreview(
        source,
        source.files[part.file].label if part is not None else "",
        rows,
        len(raw.rejects) if raw is not None else 0,
        tuple(columns.values()),
        tuple(steps),
        {} if failed else _field_kinds(loaded, frame),
        _field_columns(loaded),
        failed,
    )


def _field_columns(loaded: LoadedPipeline) -> dict[str, tuple[str, ...]]:
    sample = loaded.pipeline.sample
    return {
        KEY_FIELD: (sample.key,),
        **{n: (c,) if isinstance(c, str) else tuple(c) for n, c in sample.fields.items()},
    }


def _run(
    stage: StageConfig,
    label: str,
    frame: pd.DataFrame,
    base_dir: str,
    code: dict[str, str],
    tokenizer: TokenizerFile | None,
) -> pd.DataFrame:
    """The stage's rows of ``frame``; a dedupe keeps the first row of each key within the sample."""
    keep = None
    if stage.kind == "dedupe":
        hashes = dedupe_hashes(frame, stage.args.columns, label)
        first = np.unique(hashes, axis=0, return_index=True)[1] if len(hashes) else []
        keep = np.zeros(len(frame), dtype=bool)
        keep[first] = True
    return run_stage(stage, label, frame, base_dir, keep, code, tokenizer).frame


def _step(
    stage: StageConfig, label: str, before: pd.DataFrame, after: pd.DataFrame
) -> StageOnSample:
    added = tuple(str(c) for c in after.columns if c not in before.columns)
    removed = tuple(str(c) for c in before.columns if c not in after.columns)
    return StageOnSample(label, stage_shown(stage, label), len(before), len(after), added, removed)


def _columns_after(
    stage: StageConfig, label: str, columns: dict[str, Column], after: pd.DataFrame
) -> dict[str, Column]:
    """The columns after a stage: what a cast names is cast there; a column a stage added, or whose
    type it changed, is that stage's."""
    out = {}
    for name in map(str, after.columns):
        kind = type_name(after[name])
        known = columns.get(name)
        was = known.type if known is not None else None
        if stage.kind == "cast" and name in stage.args:
            out[name] = Column(name, stage.args[name], CAST, label, was)
        elif known is None:
            out[name] = Column(name, kind, ADDED, label)
        elif stage.kind in ("map", "fillna") and len(after) and kind != known.type:
            out[name] = Column(name, kind, CHANGED, label, was)
        else:
            out[name] = known
    return out


def _field_kinds(loaded: LoadedPipeline, frame: pd.DataFrame) -> dict[str, tuple[str, ...]]:
    """Each sample field's kinds of value on the sample (empty when no row reached it, or a
    column it names is missing)."""
    from datapipe.builder.encode import SampleEncoder

    sample = loaded.pipeline.sample
    encoder = SampleEncoder(sample.key, sample.fields, numeric=False, allow_dots_in_keys=True)
    kinds: dict[str, set[str]] = {name: set() for name in (KEY_FIELD, *sample.fields)}
    if any(c not in frame.columns for c in encoder.columns):
        return {name: () for name in kinds}
    for row in frame.head(1000)[encoder.columns].to_dict("records"):
        try:
            _, _, row_kinds = encoder.encode(row)
        except (DatapipeError, ValueError):  # a row the build would reject
            continue
        kinds[KEY_FIELD].add("str")
        for name, kind in row_kinds.items():
            kinds[name].add(kind)
    return {name: tuple(sorted(k)) for name, k in kinds.items()}
