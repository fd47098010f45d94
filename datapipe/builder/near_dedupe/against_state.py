"""A version checked against, from its build state: the signatures its own near_dedupe stage made,
where that stage signed the text the version holds with this stage's shingle, hashes and seed,
picked out by the keys of the version's shard indexes (no text is read or signed again)."""

from __future__ import annotations

import json

import numpy as np

from datapipe.builder.config import Pipeline, parse_pipeline
from datapipe.builder.config_parts import NearDedupeArgs
from datapipe.builder.incremental import load_state
from datapipe.builder.removals import Signed
from datapipe.errors import DatapipeError
from datapipe.formats.index import ShardIndex
from datapipe.storage.fs import read_bytes
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store

# stages after which a column holds the value it had before: the signed text is the stored text
KEEPS_VALUES = ("dropna", "filter", "dedupe", "near_dedupe", "validate", "tokenize")
SIGNED_WITH = ("shingle", "hashes", "seed")  # the settings a signature depends on


def signed_from_state(
    other: Store, name: str, manifest: Manifest, args: NearDedupeArgs, label: str
) -> tuple[list[Signed], str | None]:
    """Version ``manifest`` of ``name`` as blocks of signed documents labelled ``label#KEY`` from
    its build state; or no blocks and why its state cannot stand for its documents."""
    stage, why = _signing_stage(manifest, args)
    if stage is None:
        return [], why
    state = load_state(other.build_state(name, manifest.version) or b"")
    known = state.dedupe.get(stage) if state is not None else None
    blocks = [s for s in (known or {}).values() if isinstance(s, Signed)]
    if not blocks:
        return [], "it has no readable build state with its near_dedupe signatures"
    keys = _version_keys(other, name, manifest)
    labels = np.concatenate([b.labels for b in blocks])
    inside = np.isin(labels, keys)
    found, counts = np.unique(labels[inside], return_counts=True)
    if len(found) != len(np.unique(keys)) or (counts > 1).any():
        return [], "its build state does not name each of its documents once by its key"
    ends = np.cumsum([len(b.labels) for b in blocks])[:-1]
    out = []
    for block, rows in zip(blocks, np.split(inside, ends), strict=True):
        if rows.any():
            named = np.char.add(f"{label}#", block.labels[rows])
            out.append(Signed(block.signatures[rows], named))
    return out, None


def _signing_stage(manifest: Manifest, args: NearDedupeArgs) -> tuple[int | None, str | None]:
    """The index of the version's near_dedupe stage that signed the text of its field
    ``args.field`` as ``args`` would, or None and why there is none."""
    try:
        pipeline = parse_pipeline(json.dumps(manifest.lineage.pipeline), "its pipeline")
    except DatapipeError:
        return None, "its pipeline cannot be read by this datapipe"
    column = pipeline.sample.fields.get(args.field)
    why = f"its pipeline has no near_dedupe stage on {args.field!r}"
    for i in reversed(range(len(pipeline.stages))):
        stage = pipeline.stages[i]
        if stage.kind != "near_dedupe" or stage.args.field != column:
            continue
        differ = [k for k in SIGNED_WITH if getattr(stage.args, k) != getattr(args, k)]
        if differ:
            why = "its near_dedupe stage signed with " + ", ".join(
                f"{k} {getattr(stage.args, k)}" for k in differ
            )
            continue
        if not _keeps_values(pipeline, i):
            return None, f"a stage after its near_dedupe stage may change {column!r}"
        return i, None
    return None, why


def _keeps_values(pipeline: Pipeline, stage: int) -> bool:
    """Whether every stage after ``stage`` leaves the values of the rows it keeps as they were."""
    return all(s.kind in KEEPS_VALUES for s in pipeline.stages[stage + 1 :])


def _version_keys(other: Store, name: str, manifest: Manifest) -> np.ndarray:
    """Every document key of the version, from its shard indexes."""
    keys: list[str] = []
    for entry in manifest.shards:
        path = other.shard_file(name, manifest.version, entry, index=True)
        keys += ShardIndex.from_bytes(read_bytes(other.fs, path), path).keys()
    return np.array(keys, dtype=str)
