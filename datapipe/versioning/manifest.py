"""The manifest of one version: what it holds, where it came from, and the id derived from both.

The version id is the sha256 of the canonical JSON of the manifest without the fields that
cannot be reproduced or do not change a byte: ``version`` itself, ``parent``, ``created_at``,
``host`` and ``lineage.environment`` (tool versions; a change there that alters output shows
up in the shard hashes anyway). Same inputs, config and code give the same id.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from datapipe.errors import ConfigError, FormatVersionError

FORMAT_VERSION = 1
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
    environment: dict[str, str] = field(default_factory=dict)  # datapipe, dask, pyarrow, python versions


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

    @property
    def samples(self) -> int:
        """Samples over all shards."""
        return sum(s.samples for s in self.shards)

    @property
    def bytes(self) -> int:
        """Bytes of all shards (indexes not counted)."""
        return sum(s.bytes for s in self.shards)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict, with totals included for readers that do not sum."""
        data = asdict(self)
        data["samples"], data["bytes"] = self.samples, self.bytes
        return data

    def content_id(self) -> str:
        """The version id: sha256 of the reproducible part of the manifest."""
        data = self.to_dict()
        for key in _NOT_IN_ID:
            data.pop(key)
        data["lineage"].pop("environment")
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
        if version != FORMAT_VERSION:
            raise FormatVersionError(
                f"{where}: manifest format version {version!r} is not supported (this datapipe reads "
                f"version {FORMAT_VERSION}); upgrade datapipe"
            )
        try:
            return _manifest_from_dict(raw)
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{where}: malformed manifest ({type(e).__name__}: {e})") from None


def _build(kind: type, raw: dict[str, Any]) -> Any:
    names = {f.name for f in fields(kind)}
    return kind(**{k: v for k, v in raw.items() if k in names})


def _manifest_from_dict(raw: dict[str, Any]) -> Manifest:
    lineage = raw.get("lineage", {})
    return _build(Manifest, {
        **raw,
        "shards": tuple(_build(ShardEntry, s) for s in raw["shards"]),
        "stages": tuple(_build(StageCounts, s) for s in raw.get("stages", ())),
        "lineage": _build(Lineage, {
            **lineage,
            "sources": tuple(_build(SourceFile, s) for s in lineage.get("sources", ())),
            "code": tuple(_build(CodeRef, c) for c in lineage.get("code", ())),
        }),
    })


def canonical_json(data: Any) -> bytes:
    """One byte string per value: sorted keys, no whitespace, UTF-8."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
