"""The manifest of one version: what it holds, where it came from, and the id derived from both.

The version id is the sha256 of the canonical JSON of the manifest without the fields that
cannot be reproduced or do not change a byte: ``version`` itself, ``parent``, ``created_at``,
``host``, each shard's ``stored_in`` and ``stored_as`` (where its file lies) and
``lineage.environment`` (tool versions; a change there that alters output shows up in the shard
hashes anyway). Same inputs, config and code give the same id.

``Manifest`` and its parts (:mod:`datapipe.versioning.manifest_parts`) are the one description of
manifest.json: reading checks each value against its annotation
(:mod:`datapipe.versioning.typed_json`), and ``schemas/manifest.schema.json`` is generated from
them (``python -m datapipe.versioning.manifest > schemas/manifest.schema.json``; a test fails when
it drifts).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from datapipe.errors import ConfigError, FormatVersionError, IntegrityError
from datapipe.versioning.manifest_parts import (
    COMPANIONS_FORMAT,
    FORMAT_VERSION,
    READABLE_FORMATS,
    ClassName,
    CodeRef,
    Companion,
    Count,
    FileName,
    FormatVersion,
    Lineage,
    Name,
    Sha256,
    ShardEntry,
    ShardFormatName,
    SourceFile,
    Splits,
    StageCounts,
    Str,
    TokenizerRef,
)
from datapipe.versioning.typed_json import RECORD, Malformed, read_record, record_json_schema

MANIFEST_NAME = "manifest.json"
REJECTED_NAME = "rejected.parquet"
_NOT_IN_ID = ("version", "parent", "created_at", "host")
# in every manifest.json, though code building a manifest may leave them to their defaults
_ALWAYS_WRITTEN = ("format_version", "version")


@dataclass(frozen=True)
class Manifest:
    """A complete description of one dataset version (stored as manifest.json)."""

    __pydantic_config__ = RECORD

    name: Name
    shard_format: ShardFormatName
    fields: dict[str, Str]
    """Field name -> the kinds of value it held (``int|str``)."""
    shards: tuple[ShardEntry, ...]
    stages: tuple[StageCounts, ...] = ()
    lineage: Lineage = field(default_factory=Lineage)
    rejected: FileName | None = None
    """The quarantine file (rejected.parquet) in the version directory, when rows were rejected."""
    rejected_rows: Count = 0
    parent: Sha256 | None = None
    created_at: Str = ""
    """The commit's UTC time in ISO 8601, to the microsecond."""
    host: Str = ""
    version: Sha256 = ""
    """The version id: sha256 of the canonical manifest without version, parent, created_at, host,
    shards[].stored_in, shards[].stored_as and lineage.environment."""
    format_version: FormatVersion = FORMAT_VERSION
    """3: shards cut by content, with companion files (``shards[].companions``: token shards,
    since datapipe 0.3); 2: shards cut by content (a build since datapipe 0.2); 1: cut greedily by
    size."""
    splits: Splits | None = None
    """Only in a version built with a splits section (left out of the JSON, and so of the id,
    otherwise)."""
    classes: tuple[ClassName, ...] | None = None
    """Only in a version built from a class_folders source: the class names in label order (label
    i is classes[i])."""

    @property
    def samples(self) -> int:
        """Samples over all shards."""
        return sum(s.samples for s in self.shards)

    @property
    def tokens(self) -> int | None:
        """Token ids over all shards of a token version; None for other versions (and for one
        whose shards do not all record theirs)."""
        counts = [s.tokens for s in self.shards]
        if not counts or None in counts:
            return None
        return sum(c for c in counts if c is not None)

    @property
    def bytes(self) -> int:
        """Bytes of all shards and their companions (indexes not counted)."""
        return sum(s.data_bytes for s in self.shards)

    @property
    def own_bytes(self) -> int:
        """Bytes of the shards stored in this version's own directory (where the manifest puts
        them: `ls`, `log` and `du` also count hard links as shared, versioning/sizes.py)."""
        return sum(s.data_bytes for s in self.shards if s.stored_in is None)

    @property
    def shared_bytes(self) -> int:
        """Bytes of the shards this version shares with another version's directory
        (``stored_in``)."""
        return self.bytes - self.own_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict, with totals included for readers that do not sum."""
        data = asdict(self)
        data["samples"], data["bytes"] = self.samples, self.bytes
        if self.tokens is not None:  # other versions keep the manifest (and id) they had
            data["tokens"] = self.tokens
        # a version without splits has the manifest (and id) it had before splits
        if self.splits is None:
            del data["splits"]
        if self.classes is None:  # likewise for every source but class_folders
            del data["classes"]
        if self.lineage.tokenizer is None:  # and for every pipeline without a tokenize stage
            del data["lineage"]["tokenizer"]
        for shard in data["shards"]:
            for optional in ("split", "stored_in", "stored_as", "tokens"):
                if shard[optional] is None:
                    del shard[optional]
            # a shard without companions has the entry (and the version its id) it had before
            if not shard["companions"]:
                del shard["companions"]
        return data

    def own_files(self) -> list[str]:
        """The files of the version directory beside its shards: the quarantine, the tokenizer."""
        files = [self.rejected] if self.rejected else []
        if self.lineage.tokenizer is not None:
            files.append(self.lineage.tokenizer.file)
        return files

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

    def in_written_format(self) -> Manifest:
        """This manifest in the format a commit writes it: 3 when a shard has companions (a
        datapipe that reads only 2 says to upgrade, not that the file is damaged), else 2."""
        companions = any(s.companions for s in self.shards)
        return replace(self, format_version=COMPANIONS_FORMAT if companions else FORMAT_VERSION)

    def to_json(self) -> bytes:
        """The bytes of manifest.json (sorted keys, indented for people)."""
        return (
            json.dumps(self.to_dict(), sort_keys=True, indent=1, ensure_ascii=False).encode()
            + b"\n"
        )

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


@dataclass(frozen=True)
class _Totals:
    """Totals manifest.json holds beside the manifest's fields, for readers that do not sum;
    recomputed from the shards when read."""

    __pydantic_config__ = {**RECORD, "extra": "ignore"}

    samples: Count | None = None
    """Samples over all shards."""
    bytes: Count | None = None
    """Bytes of all shards and their companions (indexes not counted)."""
    tokens: Count | None = None
    """Token ids over all shards: only in a token version (its documents are ``samples``)."""


_RECORD_NAMES = {
    Manifest: "manifest",
    Splits: "splits",
    ShardEntry: "shard",
    Companion: "companion",
    StageCounts: "stage",
    Lineage: "lineage",
    SourceFile: "source",
    CodeRef: "code",
    TokenizerRef: "tokenizer",
}
_TOTALS = tuple(f.name for f in fields(_Totals))


def _manifest_from_dict(raw: dict[str, Any], where: str = "manifest") -> Manifest:
    """A manifest from parsed JSON; every wrong or missing field is an IntegrityError naming
    ``where`` and it."""
    fields_only = {key: value for key, value in raw.items() if key not in _TOTALS}
    try:
        missing = next((key for key in _ALWAYS_WRITTEN if key not in raw), None)
        if missing is not None:
            raise Malformed(missing, "missing")
        manifest = read_record(Manifest, fields_only, _RECORD_NAMES, also=_TOTALS)
        totals = read_record(_Totals, raw, _RECORD_NAMES)
    except Malformed as e:
        raise IntegrityError(
            f"{where}: malformed manifest: {e}; the file was edited or damaged "
            "(restore it from a copy, or delete its version directory and build again)"
        ) from None
    problem = (
        _split_problem(manifest)
        or _companions_problem(manifest)
        or _totals_problem(manifest, totals)
    )
    if problem:
        raise IntegrityError(
            f"{where}: malformed manifest: {problem}; the file was edited or damaged"
        )
    return manifest


def _totals_problem(manifest: Manifest, totals: _Totals) -> str | None:
    """Why the totals or the quarantine disagree with the shards, if they do."""
    for total in _TOTALS:
        written, actual = getattr(totals, total), getattr(manifest, total)
        if written is not None and written != actual:
            return f"field {total!r} is {written} but the shards add up to {actual}"
    if (manifest.rejected is None) != (manifest.rejected_rows == 0):
        return (
            f"field 'rejected' is {manifest.rejected!r} but 'rejected_rows' is "
            f"{manifest.rejected_rows}"
        )
    return None


def _companions_problem(manifest: Manifest) -> str | None:
    """Why the shards' companions do not fit the manifest's format version, if they do not."""
    marked = next((i for i, s in enumerate(manifest.shards) if s.companions), None)
    if marked is None or manifest.format_version >= COMPANIONS_FORMAT:
        return None
    return (
        f"field 'shards[{marked}].companions' needs manifest format {COMPANIONS_FORMAT}, but "
        f"'format_version' is {manifest.format_version}"
    )


def _split_problem(manifest: Manifest) -> str | None:
    """Why the shards' splits disagree with the splits section, if they do."""
    splits = manifest.splits
    if splits is None:
        marked = next((i for i, s in enumerate(manifest.shards) if s.split is not None), None)
        return (
            None
            if marked is None
            else f"field 'shards[{marked}].split' names a split, but there is no 'splits'"
        )
    if set(splits.samples) != set(splits.fractions):
        return "fields 'splits.samples' and 'splits.fractions' name different splits"
    counts = dict.fromkeys(splits.names, 0)
    for i, shard in enumerate(manifest.shards):
        if shard.split not in counts:
            return (
                f"field 'shards[{i}].split' is {shard.split!r}, not one of "
                f"{', '.join(splits.names)}"
            )
        counts[shard.split] += shard.samples
    wrong = next((n for n in splits.names if counts[n] != splits.samples[n]), None)
    if wrong is not None:
        return (
            f"field 'splits.samples.{wrong}' is {splits.samples[wrong]} but its "
            f"shards add up to {counts[wrong]}"
        )
    return None


def manifest_json_schema() -> dict[str, Any]:
    """The JSON Schema of manifest.json (``schemas/manifest.schema.json`` holds a copy)."""
    schema = record_json_schema(Manifest)
    schema["properties"].update(record_json_schema(_Totals)["properties"])
    for key in _ALWAYS_WRITTEN:
        schema["properties"][key].pop("default")
    schema["required"] = [*_ALWAYS_WRITTEN, *schema["required"]]
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://datapipe.dev/schemas/manifest.schema.json"
    schema["title"] = "datapipe version manifest (STORE/NAME/versions/VERSION/manifest.json)"
    return schema


def short_id(digest: object) -> str:
    """A version id (or any sha256) as people see it: its first 12 hex digits.

    Anything else is shown by its ``str`` cut the same way: a run's state read from a file may
    hold a value of another type where an id belongs."""
    return str(digest)[:12]


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
    counts, the kinds of value each field held (one mapping per partition, merged into ``fields``)
    and its lineage.
    The quarantine file is named when a stage rejected rows; ``splits``: the splits section, with
    splits; ``classes``: the class names in label order, for a class_folders source."""
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
    committed within one second still sort by when they were made)."""
    return re.sub(r"\.\d+", "", created_at)  # an ISO 8601 time has no other dot


if __name__ == "__main__":
    sys.stdout.write(json.dumps(manifest_json_schema(), indent=2, sort_keys=True) + "\n")
