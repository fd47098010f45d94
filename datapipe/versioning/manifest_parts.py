"""The parts of a manifest (its shards, stage counts, lineage and splits) and the kinds of JSON
value in them: what each value must be, which reading checks and the JSON Schema states."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Annotated, Any

from datapipe.formats.registry import FORMATS
from datapipe.versioning.typed_json import RECORD, Value

FORMAT_VERSION = 2  # 2: builds cut shards by content (builder/shard_plan.py); 1 read as well
# a version whose shards have companion files; every other version stays format 2 (and keeps its id)
COMPANIONS_FORMAT = 3
READABLE_FORMATS = (1, 2, 3)
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"  # dataset names and refs
SPLIT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


# The kinds of JSON value in a manifest: what each must be, and what an error says.
Int = Annotated[int, Value("an integer", int)]
Count = Annotated[int, Value("a non-negative integer", int, ge=0)]
Str = Annotated[str, Value("a string", str)]
Sha256 = Annotated[
    str, Value("64 lowercase hex digits (a sha256)", str, pattern=r"^[0-9a-f]{64}$", quoted=True)
]
FileName = Annotated[
    str,
    Value(
        "a file name inside the version directory",
        str,
        pattern=r"^[^/\\]+$",
        check=lambda name: name not in (".", ".."),
        schema={
            "not": {"enum": [".", ".."]},
            "description": "a file name inside the version directory",
        },
        quoted=True,
    ),
]
Name = Annotated[
    str,
    Value("a name of letters, digits, '.', '_' and '-'", str, pattern=NAME_PATTERN, quoted=True),
]
SplitName = Annotated[str, Value("a split name", str, pattern=SPLIT_PATTERN, quoted=True)]
ClassName = Annotated[str, Value("a class name", str, min_length=1, quoted=True)]
ShardFormatName = Annotated[
    str, Value(f"one of {', '.join(FORMATS)}", str, choices=tuple(FORMATS), quoted=True)
]
FormatVersion = Annotated[int, Value("an integer", int, schema={"enum": list(READABLE_FORMATS)})]
Fraction = Annotated[float, Value("a number in (0, 1]", float, gt=0, le=1)]
Suffix = Annotated[
    str, Value("a file suffix such as '.idx'", str, pattern=r"^\.[A-Za-z0-9_-]{1,32}$", quoted=True)
]


def companion_name(shard: str, suffix: str) -> str:
    """The file name of companion ``suffix`` of the shard file ``shard``: its extension replaced
    (``shard-000000.bin`` -> ``shard-000000.idx``), as ``ShardFormat.companion_path`` names it."""
    return posixpath.splitext(shard)[0] + suffix


@dataclass(frozen=True)
class Companion:
    """A file a shard's format writes beside the shard and reads with it (a token shard's
    Megatron-Core index ``.idx`` and documents table ``.docs``), with its size and hash."""

    __pydantic_config__ = RECORD

    suffix: Suffix
    """Its file name is the shard's with the extension replaced by this suffix, in the directory
    that holds the shard (``shard-000000.bin`` -> ``shard-000000.idx``)."""
    bytes: Count
    sha256: Sha256


@dataclass(frozen=True)
class ShardEntry:
    """One shard file of a version and its index, with their sizes and hashes."""

    __pydantic_config__ = RECORD

    path: FileName
    """The shard file, in the version directory."""
    samples: Count
    bytes: Count
    sha256: Sha256
    index_path: FileName
    """The binary index (layout in schemas/shard-index.md); holds each sample's key and sha256."""
    index_bytes: Count
    index_sha256: Sha256
    split: SplitName | None = None
    """The split of its samples: only in a version with splits, where every shard has one."""
    stored_in: Sha256 | None = None
    """The version whose directory holds this shard and its index
    (STORE/NAME/versions/STORED_IN/PATH), for a shard shared with an earlier version; absent: this
    version's own directory. Where the bytes lie, not what they are: not part of the version id."""
    stored_as: tuple[FileName, FileName] | None = None
    """The file names of the shard and its index in the stored_in directory, where they differ from
    path and index_path (an incremental build renumbered the shard); not part of the version id."""
    companions: tuple[Companion, ...] = ()
    """The files the shard's format keeps beside it (manifest format 3; absent: none), named after
    the shard; stored with it, shared with it, removed with it."""
    tokens: Count | None = None
    """The token ids in a token shard (its documents are ``samples``); absent for other formats,
    whose entries (and version ids) stay as they were."""

    def stored_names(self) -> tuple[str, str]:
        """The file names of the shard and its index in the directory that holds them."""
        return self.stored_as or (self.path, self.index_path)

    def companion_names(self) -> list[tuple[Companion, str]]:
        """Each companion with its file name in the directory that holds the shard."""
        shard = self.stored_names()[0]
        return [(c, companion_name(shard, c.suffix)) for c in self.companions]

    def stored_files(self) -> list[str]:
        """Every file of the shard in the directory that holds it: shard, index, companions."""
        return [*self.stored_names(), *(name for _, name in self.companion_names())]

    @property
    def data_bytes(self) -> int:
        """Bytes of the shard file and its companions: what the shard weighs (its index aside)."""
        return self.bytes + sum(c.bytes for c in self.companions)


@dataclass(frozen=True)
class StageCounts:
    """Rows through one build stage: rows_in = rows_out + dropped + rejected."""

    __pydantic_config__ = RECORD

    stage: Str
    rows_in: Count
    rows_out: Count
    dropped: Count = 0
    rejected: Count = 0


@dataclass(frozen=True)
class SourceFile:
    """A raw input file: its URL, size and content hash (sha256, or etag on object stores)."""

    __pydantic_config__ = RECORD

    path: Str
    size: Count
    hash: Str


@dataclass(frozen=True)
class CodeRef:
    """User code a pipeline references: module and the sha256 of its file."""

    __pydantic_config__ = RECORD

    module: Str
    sha256: Sha256


TOKENIZER_NAME = "tokenizer.json"  # the tokenize stage's file, kept in the version directory


@dataclass(frozen=True)
class TokenizerRef:
    """The tokenizer that made a version's token ids: a copy of its file in the version directory
    (so a reader can always decode), its hash, the library that ran it and the ids it added."""

    __pydantic_config__ = RECORD

    file: FileName
    """The copy of the tokenizer.json in the version directory (tokenizer.json)."""
    bytes: Count
    sha256: Sha256
    """The file's sha256: a new tokenizer file makes a new version."""
    library: Str
    """The tokenizers library's version: a new one makes a new version too."""
    vocab_size: Count
    """The largest id plus one."""
    dtype: Str
    """The ids' numpy dtype: uint16 up to 65,536 ids, else int32."""
    eos_id: Count | None = None
    """The end-of-text id appended to each document; null: none."""
    bos_id: Count | None = None
    """The beginning-of-text id put before each document; null: none."""


@dataclass(frozen=True)
class Lineage:
    """Everything the version was made from."""

    __pydantic_config__ = RECORD

    pipeline: dict[str, Any] = field(default_factory=dict)
    """The canonical pipeline config."""
    sources: tuple[SourceFile, ...] = ()
    code: tuple[CodeRef, ...] = ()
    seed: Int | None = None
    environment: dict[str, Str] = field(default_factory=dict)
    """Versions of datapipe, dask, pyarrow and python; not part of the version id."""
    tokenizer: TokenizerRef | None = None
    """Only in a version built with a tokenize stage (left out of the JSON, and so of the id,
    otherwise)."""


@dataclass(frozen=True)
class Splits:
    """How a version's samples were split: the pipeline's fractions, ``by`` column and seed, and per
    split its samples. Each split has its own shards (``ShardEntry.split``); splits take their
    intervals in name order."""

    __pydantic_config__ = RECORD

    fractions: dict[str, Fraction]
    """Split name -> fraction; the splits take their intervals of the hash's [0, 1) in name
    order."""
    samples: dict[str, Count]
    """Split name -> samples in its shards."""
    by: Str | None = None
    """The column whose value decided the split; null: the sample key."""
    seed: Count = 0
    """Salt of the hash."""

    @property
    def names(self) -> list[str]:
        """The split names, in the order of their intervals and shards (sorted)."""
        return sorted(self.fractions)
