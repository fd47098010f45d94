"""The manifest of one version: what it holds, where it came from, and the id derived from both.

The version id is the sha256 of the canonical JSON of the manifest without the fields that
cannot be reproduced or do not change a byte: ``version`` itself, ``parent``, ``created_at``,
``host``, each shard's ``stored_in`` (where its file lies) and ``lineage.environment`` (tool
versions; a change there that alters output shows up in the shard hashes anyway).
Same inputs, config and code give the same id.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from datapipe.errors import ConfigError, FormatVersionError, IntegrityError

FORMAT_VERSION = 2  # 2: builds cut shards by content (builder/shard_plan.py); 1 read as well
READABLE_FORMATS = (1, 2)
MANIFEST_NAME = "manifest.json"
REJECTED_NAME = "rejected.parquet"
_NOT_IN_ID = ("version", "parent", "created_at", "host")


@dataclass(frozen=True)
class ShardEntry:
    """One shard file of a version and its index, with their sizes and hashes."""

    path: str  # relative to the version directory
    samples: int
    bytes: int
    sha256: str
    index_path: str
    index_bytes: int
    index_sha256: str
    # the split its samples belong to, in a version with splits (left out of JSON when None)
    split: str | None = None
    # the version whose directory holds the file and its index (None: this version's own); where the
    # bytes are, not what they are: left out of JSON when None and never part of the version id
    stored_in: str | None = None
    # the names of the file and its index in that directory, where they differ from
    # ``path``/``index_path`` (a reused shard renumbered by an incremental build); likewise out of
    # JSON when None and out of the id
    stored_as: tuple[str, str] | None = None

    def stored_names(self) -> tuple[str, str]:
        """The file names of the shard and its index in the directory that holds them."""
        return self.stored_as or (self.path, self.index_path)


@dataclass(frozen=True)
class StageCounts:
    """Rows through one build stage: rows_in = rows_out + dropped + rejected."""

    stage: str
    rows_in: int
    rows_out: int
    dropped: int = 0
    rejected: int = 0


@dataclass(frozen=True)
class SourceFile:
    """A raw input file: its URL, size and content hash (sha256, or etag on object stores)."""

    path: str
    size: int
    hash: str


@dataclass(frozen=True)
class CodeRef:
    """User code a pipeline references: module and the sha256 of its file."""

    module: str
    sha256: str


@dataclass(frozen=True)
class Lineage:
    """Everything the version was made from."""

    pipeline: dict[str, Any] = field(default_factory=dict)  # the canonical pipeline config
    sources: tuple[SourceFile, ...] = ()
    code: tuple[CodeRef, ...] = ()
    seed: int | None = None
    # datapipe, dask, pyarrow, python versions
    environment: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Splits:
    """How a version's samples were split: the pipeline's fractions, ``by`` column and seed, and per
    split its
    samples. Each split has its own shards (``ShardEntry.split``); splits take their intervals in
    name order."""

    fractions: dict[str, float]
    samples: dict[str, int]
    by: str | None = None  # None: the sample key decides
    seed: int = 0

    @property
    def names(self) -> list[str]:
        """The split names, in the order of their intervals and shards (sorted)."""
        return sorted(self.fractions)


@dataclass(frozen=True)
class Manifest:
    """A complete description of one dataset version (stored as manifest.json)."""

    name: str
    shard_format: str
    fields: dict[str, str]  # field name -> type
    shards: tuple[ShardEntry, ...]
    stages: tuple[StageCounts, ...] = ()
    lineage: Lineage = field(default_factory=Lineage)
    rejected: str | None = None  # relative path of the quarantine file, when rows were rejected
    rejected_rows: int = 0
    parent: str | None = None
    created_at: str = ""
    host: str = ""
    version: str = ""
    format_version: int = FORMAT_VERSION
    splits: Splits | None = None  # left out of JSON (and so of the id) when None
    # a class_folders source's class names, label order; left out when None
    classes: tuple[str, ...] | None = None

    @property
    def samples(self) -> int:
        """Samples over all shards."""
        return sum(s.samples for s in self.shards)

    @property
    def bytes(self) -> int:
        """Bytes of all shards (indexes not counted)."""
        return sum(s.bytes for s in self.shards)

    @property
    def own_bytes(self) -> int:
        """Bytes of the shards stored in this version's own directory."""
        return sum(s.bytes for s in self.shards if s.stored_in is None)

    @property
    def shared_bytes(self) -> int:
        """Bytes of the shards this version shares with another version's directory
        (``stored_in``)."""
        return self.bytes - self.own_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict, with totals included for readers that do not sum."""
        data = asdict(self)
        data["samples"], data["bytes"] = self.samples, self.bytes
        # a version without splits has the manifest (and id) it had before splits
        if self.splits is None:
            del data["splits"]
        if self.classes is None:  # likewise for every source but class_folders
            del data["classes"]
        for shard in data["shards"]:
            for optional in ("split", "stored_in", "stored_as"):
                if shard[optional] is None:
                    del shard[optional]
        return data

    def split_shards(self, split: str) -> list[int]:
        """The numbers (in ``shards``) of the shards of ``split``."""
        return [i for i, s in enumerate(self.shards) if s.split == split]

    def content_id(self) -> str:
        """The version id: sha256 of the reproducible part of the manifest."""
        data = self.to_dict()
        for key in _NOT_IN_ID:
            data.pop(key)
        data["lineage"].pop("environment")
        # a shard reused from another version's directory is the same content
        for shard in data["shards"]:
            shard.pop("stored_in", None)
            shard.pop("stored_as", None)
        return hashlib.sha256(canonical_json(data)).hexdigest()

    def with_id(self) -> Manifest:
        """This manifest with ``version`` set to its content id."""
        return replace(self, version=self.content_id())

    def to_json(self) -> bytes:
        """The bytes of manifest.json (sorted keys, indented for people)."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=1, ensure_ascii=False).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Manifest:
        """Parse manifest.json; a clear error for unknown versions or malformed content."""
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(f"{where}: not a valid manifest ({e})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: not a valid manifest (expected a JSON object)")
        version = raw.get("format_version")
        if version not in READABLE_FORMATS:
            raise FormatVersionError(
                f"{where}: manifest format version {version!r} is not supported (this "
                "datapipe reads "
                f"versions {', '.join(map(str, READABLE_FORMATS))}); upgrade datapipe"
            )
        return _manifest_from_dict(raw, where)


class _Malformed(Exception):
    """A field of a manifest with the wrong type or value (``field`` is its dotted path)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"field {field!r}: {problem}")


_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_FILE_NAME = re.compile(r"^[^/\\]+$")

# name -> (type, required) per record; "sha256" and "file" are strings with a pattern, "count" a
# non-negative int
_SPEC: dict[str, dict[str, tuple[str, bool]]] = {
    "manifest": {
        "format_version": ("int", True),
        "name": ("str", True),
        "version": ("sha256", True),
        "parent": ("sha256?", False),
        "shard_format": ("str", True),
        "fields": ("dict[str]", True),
        "shards": ("list[shard]", True),
        "stages": ("list[stage]", False),
        "lineage": ("lineage", False),
        "rejected": ("file?", False),
        "rejected_rows": ("count", False),
        "created_at": ("str", False),
        "host": ("str", False),
        "samples": ("count", False),
        "bytes": ("count", False),
        "splits": ("splits", False),
        "classes": ("list[str]", False),
    },
    "splits": {
        "fractions": ("dict[number]", True),
        "samples": ("dict[count]", True),
        "by": ("str?", False),
        "seed": ("int", False),
    },
    "shard": {
        "path": ("file", True),
        "samples": ("count", True),
        "bytes": ("count", True),
        "sha256": ("sha256", True),
        "index_path": ("file", True),
        "index_bytes": ("count", True),
        "index_sha256": ("sha256", True),
        "split": ("str", False),
        "stored_in": ("sha256", False),
        "stored_as": ("list[file]?", False),
    },
    "stage": {
        "stage": ("str", True),
        "rows_in": ("count", True),
        "rows_out": ("count", True),
        "dropped": ("count", False),
        "rejected": ("count", False),
    },
    "lineage": {
        "pipeline": ("dict", False),
        "sources": ("list[source]", False),
        "code": ("list[code]", False),
        "seed": ("int?", False),
        "environment": ("dict[str]", False),
    },
    "source": {"path": ("str", True), "size": ("count", True), "hash": ("str", True)},
    "code": {"module": ("str", True), "sha256": ("sha256", True)},
}
_KINDS = {
    "splits": Splits,
    "shard": ShardEntry,
    "stage": StageCounts,
    "lineage": Lineage,
    "source": SourceFile,
    "code": CodeRef,
}


def _describe(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def _convert(kind: str, value: Any, where: str) -> Any:
    """``value`` checked against ``kind`` and turned into the model's type; _Malformed naming
    ``where``."""
    if kind.endswith("?"):
        return None if value is None else _convert(kind[:-1], value, where)
    if kind in ("int", "count"):
        if not isinstance(value, int) or isinstance(value, bool) or (kind == "count" and value < 0):
            raise _Malformed(
                where, f"expected {'a non-negative ' if kind == 'count' else 'an '}integer, got {_describe(value)}"
            )
        return value
    if kind == "number":
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise _Malformed(where, f"expected a number, got {_describe(value)}")
        return value
    if kind in ("str", "sha256", "file"):
        if not isinstance(value, str):
            raise _Malformed(where, f"expected a string, got {_describe(value)}")
        if kind == "sha256" and not _HEX64.match(value):
            raise _Malformed(where, f"expected 64 lowercase hex digits (a sha256), got {value[:80]!r}")
        if kind == "file" and (not _FILE_NAME.match(value) or value in (".", "..")):
            raise _Malformed(where, f"expected a file name inside the version directory, got {value[:80]!r}")
        return value
    if kind.startswith("dict"):
        if not isinstance(value, dict):
            raise _Malformed(where, f"expected an object, got {_describe(value)}")
        if kind != "dict":
            for key, item in value.items():
                _convert(kind[5:-1], item, f"{where}.{key}")
        return value
    if kind.startswith("list["):
        if not isinstance(value, list):
            raise _Malformed(where, f"expected a list, got {_describe(value)}")
        return tuple(_convert(kind[5:-1], item, f"{where}[{i}]") for i, item in enumerate(value))
    return _record(kind, value, where)


def _record(kind: str, raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise _Malformed(where, f"expected an object, got {_describe(raw)}")
    spec, prefix = _SPEC[kind], f"{where}." if where else ""
    values = {}
    for name, (field_kind, required) in spec.items():
        if name in raw:
            values[name] = _convert(field_kind, raw[name], prefix + name)
        elif required:
            raise _Malformed(prefix + name, "missing")
    unknown = sorted(set(raw) - set(spec))
    if unknown:
        raise _Malformed(prefix + unknown[0], f"not a {kind} field (known: {', '.join(spec)})")
    if kind == "manifest":
        for total in ("samples", "bytes"):  # totals, recomputed from the shards
            values.pop(total, None)
        return Manifest(**values)
    return _KINDS[kind](**values)


def _manifest_from_dict(raw: dict[str, Any], where: str = "manifest") -> Manifest:
    """A manifest from parsed JSON; every wrong or missing field is an IntegrityError naming
    ``where`` and it."""
    try:
        manifest = _record("manifest", raw, "")
    except _Malformed as e:
        raise IntegrityError(
            f"{where}: malformed manifest: {e}; the file was edited or damaged "
            "(restore it from a copy, or delete its version directory and build again)"
        ) from None
    problem = _split_problem(manifest)
    if problem:
        raise IntegrityError(f"{where}: malformed manifest: {problem}; the file was edited or damaged")
    for total in ("samples", "bytes"):
        if total in raw and raw[total] != getattr(manifest, total):
            raise IntegrityError(
                f"{where}: malformed manifest: field {total!r} is {raw[total]} but the shards "
                f"add up to {getattr(manifest, total)}; the file was edited or damaged"
            )
    if (manifest.rejected is None) != (manifest.rejected_rows == 0):
        raise IntegrityError(
            f"{where}: malformed manifest: field 'rejected' is {manifest.rejected!r} but "
            f"'rejected_rows' is {manifest.rejected_rows}; the file was edited or damaged"
        )
    return manifest


def _split_problem(manifest: Manifest) -> str | None:
    """Why the shards' splits disagree with the splits section, if they do."""
    splits = manifest.splits
    if splits is None:
        marked = next((i for i, s in enumerate(manifest.shards) if s.split is not None), None)
        return None if marked is None else f"field 'shards[{marked}].split' names a split, but there is no 'splits'"
    if set(splits.samples) != set(splits.fractions):
        return "fields 'splits.samples' and 'splits.fractions' name different splits"
    counts = dict.fromkeys(splits.names, 0)
    for i, shard in enumerate(manifest.shards):
        if shard.split not in counts:
            return f"field 'shards[{i}].split' is {shard.split!r}, not one of {', '.join(splits.names)}"
        counts[shard.split] += shard.samples
    wrong = next((n for n in splits.names if counts[n] != splits.samples[n]), None)
    if wrong is not None:
        return f"field 'splits.samples.{wrong}' is {splits.samples[wrong]} but its shards add up to {counts[wrong]}"
    return None


def canonical_json(data: Any) -> bytes:
    """One byte string per value: sorted keys, no whitespace, UTF-8."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def assemble_manifest(
    name: str,
    shard_format: str,
    shards: Iterable[ShardEntry],
    stages: Iterable[StageCounts],
    field_kinds: Iterable[Mapping[str, Iterable[str]]],
    lineage: Lineage,
    splits: Splits | None = None,
    classes: Iterable[str] | None = None,
) -> Manifest:
    """The manifest of a new version from a build's pieces: its shards in order, the per-stage
    counts, the
    kinds of value each field held (one mapping per partition, merged into ``fields``) and its
    lineage.
    The quarantine file is named when a stage rejected rows; ``splits``: the splits section, with
    splits;
    ``classes``: the class names in label order, for a class_folders source."""
    kinds: dict[str, set[str]] = {}
    for partition in field_kinds:
        for field_name, seen in partition.items():
            kinds.setdefault(field_name, set()).update(seen)
    stages = tuple(stages)
    rejected = sum(s.rejected for s in stages)
    return Manifest(
        name=name,
        shard_format=shard_format,
        fields={field_name: "|".join(sorted(kinds[field_name])) for field_name in sorted(kinds)},
        shards=tuple(shards),
        stages=stages,
        lineage=lineage,
        rejected=REJECTED_NAME if rejected else None,
        rejected_rows=rejected,
        splits=splits,
        classes=None if classes is None else tuple(classes),
    )


def shown_time(created_at: str) -> str:
    """``created_at`` to the second, as listings show it (manifests record microseconds: versions
    committed
    within one second still sort by when they were made)."""
    return re.sub(r"\.\d+", "", created_at)  # an ISO 8601 time has no other dot
