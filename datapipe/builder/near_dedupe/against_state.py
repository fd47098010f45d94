"""A version checked against, from its build state: the signatures its own near_dedupe stage made,
where that stage signed the text the version holds with this stage's shingle, hashes and seed,
picked out by the keys of the version's shard indexes (no text is read or signed again). The
client reads the state's labels; the signatures are read by the tasks that band them."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from datapipe.builder.config import Pipeline, parse_pipeline
from datapipe.builder.config_parts import NearDedupeArgs
from datapipe.builder.incremental import InState, read_state, state_labels
from datapipe.builder.removals import Signed
from datapipe.errors import DatapipeError
from datapipe.formats.index import ShardIndex
from datapipe.storage.fs import read_bytes
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store

# stages after which a column holds the value it had before: the signed text is the stored text
KEEPS_VALUES = ("dropna", "filter", "dedupe", "near_dedupe", "validate", "tokenize")
SIGNED_WITH = ("shingle", "hashes", "seed")  # the settings a signature depends on


@dataclass(frozen=True)
class FromState:
    """Rows ``rows`` of a signed partition in a checked-against version's build state, labelled
    ``label#KEY``: read by the task that bands them."""

    kept: InState
    rows: np.ndarray
    label: str

    def load(self) -> Signed:
        """The rows' signatures and labels, read from the state."""
        signed = self.kept.load()
        named = np.char.add(f"{self.label}#", signed.labels[self.rows])
        return Signed(signed.signatures[self.rows], named)


def signed_from_state(
    other: Store, name: str, manifest: Manifest, args: NearDedupeArgs, label: str
) -> tuple[list[FromState], str | None]:
    """Version ``manifest`` of ``name`` as blocks of signed documents labelled ``label#KEY`` in
    its build state; or no blocks and why its state cannot stand for its documents."""
    stage, why = _signing_stage(manifest, args)
    if stage is None:
        return [], why
    path = other.build_state_path(name, manifest.version)
    state = read_state(other.fs, path) if path is not None else None
    known = state.dedupe.get(stage) if state is not None else None
    blocks = [s for s in (known or {}).values() if isinstance(s, InState)]
    if not blocks:
        return [], "it has no readable build state with its near_dedupe signatures"
    keys = _version_keys(other, name, manifest)
    block_labels = state_labels(blocks)
    labels = np.concatenate(block_labels)
    inside = np.isin(labels, keys)
    found, counts = np.unique(labels[inside], return_counts=True)
    if len(found) != len(np.unique(keys)) or (counts > 1).any():
        return [], "its build state does not name each of its documents once by its key"
    ends = np.cumsum([len(b) for b in block_labels])[:-1]
    out = []
    for block, rows in zip(blocks, np.split(inside, ends), strict=True):
        if rows.any():
            out.append(FromState(block, np.flatnonzero(rows), label))
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
