"""Incremental builds: what a version's build knew, kept beside its shards, so that the next build
of a changed source measures only the partitions whose bytes changed and reuses the parent's shards
whose samples did not.

The state (``build-state.npz`` in the version directory, outside the manifest and the id) holds, for
each partition, an identity (``identities``: the digest of a text block's bytes, else its source
files' content hashes and its place in them; under a key of everything else that decides what it
becomes: the pipeline, its code, the source's schema and options) and the measure pass's report; and
for each shard a digest of the (partition, row) sequence it holds. A shard of the new plan with a
digest of the parent's holds the same samples in the same order, so the same bytes: its file is the
parent's (a hard link on local disks, shared from the parent's directory on object stores). The
result is the version a from-scratch build gives; reuse only skips work.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

import numpy as np

from datapipe.builder.config import Pipeline
from datapipe.builder.passes import Measured
from datapipe.builder.quarantine import Reject
from datapipe.builder.removals import Signed
from datapipe.builder.source.base import Source
from datapipe.builder.source.class_folders import class_names
from datapipe.builder.tokenize_stage import TokenizerFile, tokenizers_version
from datapipe.errors import IntegrityError
from datapipe.versioning.manifest import FORMAT_VERSION, StageCounts, canonical_json

STATE_NAME = "build-state.npz"
# 2: shard digests over runs of rows; 3: dedupe hashes, identities with dedupe masks; 4: text
# blocks identified by their bytes (a near_dedupe stage's signatures and labels came later, in
# arrays of their own: a state without them reads the same); 5: the rejects' data in the version's
# quarantine only (a partition that carries over takes it from there: ``reject_data``)
STATE_FORMAT = 5


@dataclass
class BuildState:
    """A committed build's partitions (identity, measure report, rejects, kept keys) and shard
    digests."""

    key: str
    parts: list[str]
    measured: list[Measured]
    rejects: list[list[Reject]]  # every reject of the partition, duplicate keys included
    key_keep: list[np.ndarray]
    digests: list[str]  # per shard of the version, in manifest order
    # label -> stamp, hash, listed ns (known_hashes)
    sources: dict[str, list[Any]] = field(default_factory=dict)
    # the partition size the build ran at (partitions match only at the same one)
    blocksize: int | None = None
    # the one its pipeline asked for (sizing may have cut it)
    configured_blocksize: int | None = None
    format: int = STATE_FORMAT
    # stage -> identity there -> row hashes (a near_dedupe stage: Signed; Spooled until saved;
    # InState in a parent's state)
    dedupe: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    # placed identity -> digest of each text block (``identities``)
    blocks: dict[str, str] = field(default_factory=dict)


def state_key(
    pipeline: Pipeline,
    code: Mapping[str, str],
    source: Source,
    tokenizer: TokenizerFile | None = None,
) -> str:
    """What must be equal for a partition's report to carry over: pipeline, code (module -> sha256),
    source schema and options, the class list of a class-folders source, and the tokenize stage's
    file and library."""
    # only pipelines that tokenize have the key: the others keep the one they had
    tokenize = {"tokenizer": [tokenizer.sha256, tokenizers_version()]} if tokenizer else {}
    return hashlib.sha256(
        canonical_json(
            {
                **tokenize,
                "format": FORMAT_VERSION,
                "state": STATE_FORMAT,
                "pipeline": pipeline.canonical(),
                "code": dict(code),
                "source": [
                    source.format,
                    source.schema,
                    source.has_header,
                    sorted(map(str, source.options.items())),
                ],
                # unpinned class folders: a new class renumbers every label
                "classes": class_names(source),
            }
        )
    ).hexdigest()


def why_unusable(state: BuildState | None, key: str) -> str | None:
    """Why a parent's build ``state`` cannot stand for partitions of a build of ``key``
    (``state_key``), or None when it can."""
    if state is None:
        return "the parent has no readable build state"
    if state.format != STATE_FORMAT:
        return (
            f"the parent's build state is of format {state.format}, this datapipe "
            f"writes {STATE_FORMAT}"
        )
    if state.key != key:
        return "the pipeline, its code or the source's schema changed"
    return None


def shard_digests(
    identities: Sequence[str],
    key_keep: Sequence[np.ndarray],
    positions: Sequence[np.ndarray],
    destinations: Sequence[np.ndarray],
    shards: int,
) -> list[str]:
    """Per shard of a plan, the digest of its (partition identity, row) sequence in output order,
    written as maximal runs of consecutive rows of one partition (an unshuffled shard is a few runs,
    not a row each)."""
    ids = np.frombuffer(b"".join(bytes.fromhex(i) for i in identities), dtype=np.uint8).reshape(
        -1, 16
    )
    part = np.concatenate(
        [np.full(len(pos), i, dtype=np.int64) for i, pos in enumerate(positions)] or [[]]
    )
    row = np.concatenate([np.flatnonzero(keep) for keep in key_keep] or [[]]).astype(np.int64)
    dest = np.concatenate(list(destinations) or [[]]).astype(np.int64)
    pos = np.concatenate(list(positions) or [[]]).astype(np.int64)
    # by shard, then output position (all distinct)
    order = np.argsort(dest * max(len(pos), 1) + pos)
    part, row, dest = part[order], row[order], dest[order]
    starts = (
        np.flatnonzero(
            np.concatenate(
                [
                    [True],
                    (part[1:] != part[:-1]) | (row[1:] != row[:-1] + 1) | (dest[1:] != dest[:-1]),
                ]
            )
        )
        if len(part)
        else np.zeros(0, np.int64)
    )
    lengths = np.diff(np.append(starts, len(part))).astype("<i8")
    runs = np.concatenate(
        [
            ids[part[starts]],
            row[starts].astype("<i8").view(np.uint8).reshape(-1, 8),
            lengths.view(np.uint8).reshape(-1, 8),
        ],
        axis=1,
    )
    cuts = np.searchsorted(dest[starts], np.arange(shards + 1))
    return [
        hashlib.sha256(runs[a:b].tobytes()).hexdigest()
        for a, b in zip(cuts[:-1], cuts[1:], strict=True)
    ]


def save_state(state: BuildState) -> memoryview:
    """The state as npz bytes (``write_state``)."""
    out = io.BytesIO()
    write_state(state, out)
    return out.getbuffer()


def write_state(state: BuildState, file: BinaryIO) -> None:
    """The state as an npz file into ``file``: arrays as they are (a near_dedupe stage's signed
    partitions read back from their spool one at a time), everything else as one JSON document.
    The rejects' data is not kept: the version's quarantine holds it, in the order of ``parts``,
    each partition's rejects by row (``accounting.placed``)."""
    meta: dict[str, Any] = {
        "key": state.key,
        "parts": state.parts,
        "digests": state.digests,
        "measured": [],
        "sources": state.sources,
        "blocksize": state.blocksize,
        "format": state.format,
        "configured_blocksize": state.configured_blocksize,
        "blocks": state.blocks,
        "dedupe": {str(stage): list(known) for stage, known in state.dedupe.items()},
    }
    for m, rejects in zip(state.measured, state.rejects, strict=True):
        meta["measured"].append(
            {
                "counts": [asdict(c) for c in m.counts],
                "kinds": {k: sorted(v) for k, v in m.kinds.items()},
                "rejects": [{**asdict(r), "data": None} for r in rejects],
                "measure_rejects": len(m.rejects),
                "dropped": [asdict(r) for r in m.dropped],
                "splits": m.splits is not None,
                "newlines": m.newlines,
            }
        )
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, array in _state_arrays(state, meta):
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(array), allow_pickle=False)


def _state_arrays(state: BuildState, meta: dict[str, Any]) -> Iterator[tuple[str, np.ndarray]]:
    """The arrays of ``save_state``, one at a time, ``meta`` last."""
    for i, (m, keep) in enumerate(zip(state.measured, state.key_keep, strict=True)):
        yield f"sizes{i}", m.sizes
        yield f"keys{i}", m.key_hashes
        yield f"keep{i}", keep
        if m.splits is not None:
            yield f"splits{i}", m.splits
        if m.payloads is not None:
            yield f"payloads{i}", m.payloads
    for stage, known in state.dedupe.items():
        for k, hashes in enumerate(known.values()):
            if not isinstance(hashes, np.ndarray | Signed):  # Spooled, InState: read now
                hashes = hashes.load()
            if isinstance(hashes, Signed):  # a near_dedupe stage's signatures and labels
                yield f"labels{stage}_{k}", hashes.labels
                hashes = hashes.signatures
            yield f"dedupe{stage}_{k}", hashes
    yield "meta", np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)


@dataclass(frozen=True)
class InState:
    """A near_dedupe stage's signed partition in the build state file ``path`` of file system
    ``fs``, read where it is needed (a worker's task): a rebuild's client never holds its parent's
    signatures."""

    fs: Any
    path: str
    member: str  # STAGE_K: arrays dedupeSTAGE_K and labelsSTAGE_K

    def load(self) -> Signed:
        """The signed partition, read from the file."""
        return Signed(
            *_arrays(self.fs, self.path, [f"dedupe{self.member}", f"labels{self.member}"])
        )


def state_labels(kept: Sequence[InState]) -> list[np.ndarray]:
    """The labels of signed partitions kept in one build state file, read at once (without their
    signatures)."""
    return _arrays(kept[0].fs, kept[0].path, [f"labels{k.member}" for k in kept]) if kept else []


def _arrays(fs: Any, path: str, names: Sequence[str]) -> list[np.ndarray]:
    """Arrays ``names`` of the build state file ``path``, the rest left unread."""
    try:
        with fs.open(path, "rb") as f, np.load(f, allow_pickle=False) as z:
            return [z[name] for name in names]
    except (OSError, ValueError, KeyError) as e:
        raise IntegrityError(
            f"{path}: a build state whose signatures this build takes could not be read ({e}); "
            "run the build again"
        ) from None


def read_state(fs: Any, path: str) -> BuildState | None:
    """The state in file ``path`` of ``fs`` (``load_state``), its near_dedupe signatures left
    there (``InState``)."""
    with fs.open(path, "rb") as f:
        return load_state(f, at=(fs, path))


def _hashes(z: Any, stage: str, k: int, at: tuple[Any, str] | None) -> Any:
    """A dedupe stage's row hashes of one partition, or a near_dedupe stage's Signed (an InState
    of the file ``at``, a file system and path, where given)."""
    labels = f"labels{stage}_{k}"
    if labels not in z.files:
        return z[f"dedupe{stage}_{k}"]
    if at is not None:
        return InState(*at, f"{stage}_{k}")
    return Signed(z[f"dedupe{stage}_{k}"], z[labels])


def load_state(data: bytes | BinaryIO, at: tuple[Any, str] | None = None) -> BuildState | None:
    """The state saved by ``write_state`` (bytes, or a file open to read); None when it cannot be
    read (the build is then a full one). Given ``at``, the file system and path of the file, a
    near_dedupe stage's signed partitions are left there (``InState``)."""
    try:
        with np.load(
            io.BytesIO(data) if isinstance(data, bytes) else data, allow_pickle=False
        ) as z:
            meta = json.loads(z["meta"].tobytes())
            measured, rejects, keep = [], [], []
            for i, m in enumerate(meta["measured"]):
                # their data is the version's quarantine's (states before format 5 held it)
                all_rejects = [Reject(**{**r, "data": None}) for r in m["rejects"]]
                measured.append(
                    Measured(
                        [StageCounts(**c) for c in m["counts"]],
                        all_rejects[: m["measure_rejects"]],
                        z[f"sizes{i}"],
                        z[f"keys{i}"],
                        {k: set(v) for k, v in m["kinds"].items()},
                        z[f"splits{i}"] if m["splits"] else None,
                        z[f"payloads{i}"] if f"payloads{i}" in z.files else None,
                        [Reject(**r) for r in m.get("dropped", ())],
                        m.get("newlines"),
                    )
                )
                rejects.append(all_rejects)
                keep.append(z[f"keep{i}"])
            dedupe = {
                int(stage): {identity: _hashes(z, stage, k, at) for k, identity in enumerate(ids)}
                for stage, ids in (meta.get("dedupe") or {}).items()
            }
        return BuildState(
            meta["key"],
            meta["parts"],
            measured,
            rejects,
            keep,
            meta["digests"],
            sources=dict(meta.get("sources") or {}),
            blocksize=meta.get("blocksize"),
            configured_blocksize=meta.get("configured_blocksize"),
            format=int(meta.get("format", 1)),
            dedupe=dedupe,
            blocks=dict(meta.get("blocks") or {}),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
