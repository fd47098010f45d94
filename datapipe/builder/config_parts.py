"""The argument models of the pipeline file's stages and of a class_folders source's classes."""

from __future__ import annotations

import importlib.util
import re
import typing
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from datapipe.storage.byte_size import SIZE_PATTERN, parse_size

TypeName = Literal[
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
    "string",
    "bool",
    "bytes",
    "date",
    "datetime",
]
TYPE_NAMES: tuple[str, ...] = typing.get_args(TypeName)
STAGE_KINDS = (
    "dropna",
    "fillna",
    "filter",
    "dedupe",
    "near_dedupe",
    "cast",
    "map",
    "validate",
    "image",
    "tokenize",
)
# a size in bytes: an integer, or text such as "64MB" (storage/byte_size.py)
ByteSize = Annotated[
    int,
    pydantic.BeforeValidator(parse_size),
    pydantic.WithJsonSchema(
        {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": SIZE_PATTERN}]}
    ),
]
FORBID = ConfigDict(extra="forbid", frozen=True)
# a number; text ('min: "40"') is kept as text, so that the validate stage refuses it naming the
# column's type (builder/stages.py), which is not known before the data
Bound = Annotated[float | str, WithJsonSchema({"type": "number"})]


class DropnaArgs(BaseModel):
    """Drop rows with a null in any of ``columns`` (None: in any column)."""

    model_config = FORBID
    columns: list[str] | None = None


class FillnaArgs(BaseModel):
    """Replace nulls: column -> scalar fill value."""

    model_config = FORBID
    values: dict[str, Any]


class DedupeArgs(BaseModel):
    """Keep the first of rows equal in ``columns`` (None: in all columns)."""

    model_config = FORBID
    columns: list[str] | None = None


class NearDedupeArgs(BaseModel):
    """Remove near-duplicate documents (builder/near_dedupe/): MinHash signatures of the word
    shingles of ``field``, LSH buckets, and clusters kept at their first document in source order;
    every removed document goes to the quarantine with the one it duplicates."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    field: str = Field(default="text", min_length=1)
    """The text column (before a tokenize stage)."""
    threshold: float = Field(default=0.8, gt=0, le=1)
    """Estimated Jaccard similarity of word shingles at which two documents are duplicates."""
    shingle: int = Field(default=5, ge=1, le=64)
    """Words per shingle, after lower-casing and splitting at whitespace and punctuation."""
    hashes: int = Field(default=112, ge=1, le=1024)
    """MinHash values per document; the estimate of a pair's similarity uses all of them."""
    bands: int | None = Field(default=None, ge=1)
    """LSH bands (default: chosen with ``rows`` for the threshold, docs/guide/building.md)."""
    rows: int | None = Field(default=None, ge=1)
    """Values per band; bands x rows must fit in ``hashes``."""
    seed: int = Field(default=0, ge=0)
    """Draws the hash functions; another seed, other (equally good) signatures."""
    against: list[str] = Field(default_factory=list)
    """Versions (STORE/NAME[@REF]) whose documents this build's are checked against: a match is
    removed here, never there (decontamination against an evaluation set)."""
    empty: Literal["keep", "first"] = "keep"
    """Documents without a word: ``keep`` them all, or keep only the ``first``."""
    verify: bool = True
    """Check each candidate pair's estimated similarity against the threshold; false: every
    candidate pair is a duplicate (datatrove's rule: more found near the threshold, more removed
    below it)."""

    @model_validator(mode="after")
    def _bands_fit(self) -> NearDedupeArgs:
        # one of the two given: the other is what is left of the hashes; neither: chosen to fit
        bands = self.bands or (self.hashes // self.rows if self.rows else 1)
        rows = self.rows or (self.hashes // self.bands if self.bands else 1)
        if bands * rows > self.hashes or not bands * rows:
            raise ValueError(
                f"bands x rows is {bands} x {rows} = {bands * rows}, more than the {self.hashes} "
                "hashes; give fewer bands or rows, or more hashes"
            )
        return self


class ColumnRule(BaseModel):
    """What a ``validate`` stage checks of a column; a row breaking any rule is quarantined."""

    model_config = FORBID
    type: TypeName | None = None
    nullable: bool = True
    min: Bound | None = None
    max: Bound | None = None
    values: list[Any] | None = None
    pattern: str | None = None  # regex the whole value must match
    min_length: int | None = Field(default=None, ge=0)
    max_length: int | None = Field(default=None, ge=0)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as e:
                raise ValueError(f"not a valid regular expression: {e}") from None
        return value

    @model_validator(mode="after")
    def _ordered(self) -> ColumnRule:
        for low, high in (("min", "max"), ("min_length", "max_length")):
            lo, hi = getattr(self, low), getattr(self, high)
            numbers = not isinstance(lo, str) and not isinstance(hi, str)
            if lo is not None and hi is not None and numbers and lo > hi:
                raise ValueError(f"{low} is greater than {high}")
        return self


class ResizeArgs(BaseModel):
    """How an ``image`` stage re-encodes an image longer than ``max_side``: JPEG at ``quality``."""

    model_config = FORBID
    max_side: int = Field(ge=1)
    quality: int = Field(default=90, ge=1, le=100)


class ImageArgs(BaseModel):
    """What an ``image`` stage checks of the image bytes in ``column`` (builder/image_stage.py)."""

    model_config = FORBID
    column: str = Field(default="bytes", min_length=1)
    verify: Literal["full", "header"] = "full"
    min_side: int = Field(default=1, ge=1)
    # lowers Pillow's Image.MAX_IMAGE_PIXELS, never raises it
    max_pixels: int | None = Field(default=None, ge=1)
    resize: ResizeArgs | None = None

    @model_validator(mode="after")
    def _pillow_installed(self) -> ImageArgs:
        try:
            # the package alone: cheap, the codecs load when the stage runs
            import PIL  # noqa: F401
        except ImportError:
            raise ValueError(
                "the image stage needs Pillow, which is not installed here; install it with "
                "pip install 'datapipe[images]' (or pip install 'pillow>=10')"
            ) from None
        return self


class ShardConfig(BaseModel):
    """How samples are cut into shard files."""

    model_config = FORBID
    # tokens: Megatron-Core token shards (formats/tokens), "megatron" its other name
    format: Literal["webdataset", "tfrecord", "tokens", "megatron"] = "webdataset"
    max_bytes: ByteSize = 64 * 10**6
    max_samples: int | None = Field(default=None, ge=1)
    shuffle_seed: int | None = Field(default=None, ge=0)

    @field_validator("format")
    @classmethod
    def _one_name(cls, value: str) -> str:
        return "tokens" if value == "megatron" else value  # one name, one version id


def token_fields_problem(shard_format: str, fields: dict[str, Any] | None) -> str | None:
    """Why ``sample.fields`` cannot make token shards (they need ``tokens``, one column of ids),
    or None."""
    if shard_format != "tokens" or fields is None:
        return None
    if not isinstance(fields.get("tokens"), str):
        return (
            "format tokens writes each document's ids from the field 'tokens': add "
            "tokens: tokens to sample.fields (the tokenize stage's column)"
        )
    return None


def class_names_problem(names: typing.Sequence[str]) -> str | None:
    """What is wrong with a pinned class list (empty, a duplicate, a name that is no folder name),
    or None."""
    if not names:
        return "the class list is empty; name at least one class"
    seen: set[str] = set()
    for name in names:
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            return (
                f"{name!r} is not a folder name; a class is the name of a folder under source.path"
            )
        if name in seen:
            return f"class {name!r} is listed twice; each class has one label"
        seen.add(name)
    return None


class ClassesFile(BaseModel):
    """``classes: {from: FILE}``: class names, one a line, in a file beside the pipeline file."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    from_: str = Field(alias="from", min_length=1)


class TokenizeArgs(BaseModel):
    """What a ``tokenize`` stage encodes (builder/tokenize_stage.py): the text column ``field``
    with the Hugging Face tokenizer.json ``tokenizer``, into the column ``tokens``."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    tokenizer: str = Field(min_length=1)
    """A Hugging Face tokenizer.json: a path relative to the pipeline file, or an fsspec URL."""
    field: str = Field(default="text", min_length=1)
    """The text column; it stays beside ``tokens`` unless ``sample.fields`` leaves it out."""
    eos: bool = True
    """Append the end-of-text id after each document."""
    bos: bool = False
    """Prepend the beginning-of-text id before each document."""
    eos_token: str | None = Field(default=None, min_length=1)
    """The end-of-text token's name, where the file's special tokens do not say which it is."""
    bos_token: str | None = Field(default=None, min_length=1)
    """The beginning-of-text token's name, likewise."""
    min_tokens: int = Field(default=1, ge=0)
    """Documents with fewer ids (bos and eos counted) are dropped and counted."""

    @model_validator(mode="after")
    def _tokenizers_installed(self) -> TokenizeArgs:
        # found, not imported: the Rust extension loads where the stage runs
        if importlib.util.find_spec("tokenizers") is None:
            raise ValueError(
                "the tokenize stage needs the tokenizers library, which is not installed here; "
                "install it with pip install 'datapipe[text]' (or pip install 'tokenizers>=0.20')"
            )
        return self
