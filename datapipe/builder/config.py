"""The pipeline file: pydantic models of its YAML, loaded with errors naming file, line and key."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from datapipe.builder.config_lines import describe, dotted, key_lines
from datapipe.builder.config_parts import (
    FORBID,
    STAGE_KINDS,
    ClassesFile,
    ColumnRule,
    DedupeArgs,
    DropnaArgs,
    FillnaArgs,
    ImageArgs,
    NearDedupeArgs,
    ShardConfig,
    TokenizeArgs,
    TypeName,
    class_names_problem,
    token_fields_problem,
)
from datapipe.builder.config_parts import (
    TYPE_NAMES as TYPE_NAMES,  # re-exported: the type names a pipeline may use
)
from datapipe.builder.source.options import EXECUTION_OPTIONS
from datapipe.builder.source.registry import check_source_options
from datapipe.builder.splits import SplitsConfig
from datapipe.errors import ConfigError, NotFoundError

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAP_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
_FORBID = FORBID


class SourceConfig(BaseModel):
    """Where the rows come from: an fsspec URL or glob (relative to the pipeline file), a format."""

    model_config = _FORBID
    path: str = Field(min_length=1)
    format: Literal["csv", "parquet", "jsonl", "files", "class_folders"]
    options: dict[str, Any] = {}
    # class_folders: the class names in label order, or a file of them; None: the sorted folder
    # names
    classes: list[str] | ClassesFile | None = None

    @field_validator("classes", mode="before")
    @classmethod
    def _classes_shape(cls, value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) != {"from"} or not isinstance(value["from"], str) or not value["from"]:
                raise ValueError(
                    f"expected {{from: FILE}} (a file of class names, one a line), got keys "
                    f"{', '.join(map(str, value)) or 'none'}"
                )
            return ClassesFile(from_=value["from"])
        if isinstance(value, list):
            odd = next((v for v in value if not isinstance(v, str)), None)
            if odd is not None:
                raise ValueError(f"class names are strings; quote {odd!r}")
        elif value is not None and not isinstance(value, ClassesFile):
            raise ValueError("expected a list of class names ([cat, dog]) or {from: FILE}")
        return value

    @field_validator("classes")
    @classmethod
    def _classes(cls, value: list[str] | ClassesFile | None, info: pydantic.ValidationInfo) -> Any:
        if value is not None and info.data.get("format") != "class_folders":
            raise ValueError(
                "only a class_folders source takes classes; remove it or set format: class_folders"
            )
        problem = class_names_problem(value) if isinstance(value, list) else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _options_taken(self) -> SourceConfig:
        problem = check_source_options(self.format, self.options)
        if problem is not None:
            raise PydanticCustomError(
                "source_option",
                "options.{key}: {problem}",
                {"key": problem[0], "problem": problem[1]},
            )
        return self


# A field named "validate" shadows the deprecated BaseModel.validate classmethod; the YAML key wins.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "validate"', category=UserWarning)

    class StageConfig(BaseModel):
        """One cleaning stage, written in YAML as a mapping with exactly one key: its kind."""

        model_config = ConfigDict(
            **_FORBID, json_schema_extra={"minProperties": 1, "maxProperties": 1}
        )
        dropna: DropnaArgs | None = None
        fillna: FillnaArgs | None = None
        filter: str | None = None
        dedupe: DedupeArgs | None = None
        near_dedupe: NearDedupeArgs | None = None
        cast: dict[str, TypeName] | None = None
        map: str | None = None
        validate: dict[str, ColumnRule] | None = None
        image: ImageArgs | None = None
        tokenize: TokenizeArgs | None = None

        @model_validator(mode="before")
        @classmethod
        def _one_key(cls, data: Any) -> Any:
            known = ", ".join(STAGE_KINDS)
            if isinstance(data, StageConfig):
                return data
            if not isinstance(data, dict) or len(data) != 1:
                got = (
                    f"keys {', '.join(str(k) for k in data)}"
                    if isinstance(data, dict)
                    else repr(data)
                )
                raise ValueError(
                    f"a stage is a mapping with exactly one key, got {got}; write one stage "
                    "per list "
                    f"item, each one of: {known}"
                )
            ((kind, args),) = data.items()
            if kind not in STAGE_KINDS:
                raise PydanticCustomError(
                    "unknown_stage",
                    "unknown stage '{key}'; use one of: {known}",
                    {"key": kind, "known": known},
                )
            if args is None:
                if kind not in ("dropna", "fillna", "dedupe", "near_dedupe", "image"):
                    raise PydanticCustomError("stage_value", "'{key}' needs a value", {"key": kind})
                return {kind: {}}
            return data

        @field_validator("filter")
        @classmethod
        def _expression(cls, value: str | None) -> str | None:
            if value is not None:
                try:
                    ast.parse(value, mode="eval")
                except SyntaxError as e:
                    raise ValueError(
                        f"not a valid expression ({e.msg}); write a Python/pandas expression "
                        "over the "
                        'columns, e.g. "label >= 0"'
                    ) from None
            return value

        @field_validator("map")
        @classmethod
        def _function_spec(cls, value: str | None) -> str | None:
            if value is not None and not re.match(MAP_PATTERN, value):
                raise ValueError("expected 'module.path:function', e.g. 'mypkg.clean:fix_rows'")
            return value

        @property
        def kind(self) -> str:
            """The stage's key: one of STAGE_KINDS ("dropna", "filter", ..., "tokenize")."""
            return next(k for k in STAGE_KINDS if getattr(self, k) is not None)

        @property
        def args(self) -> Any:
            """The stage's value: an args model, a string or a column mapping, as its kind says."""
            return getattr(self, self.kind)

        def canonical(self) -> dict[str, Any]:
            """The stage as a one-key mapping {kind: args}, defaults left out, as it would be
            written in YAML."""
            dumped = self.model_dump(mode="json", exclude_defaults=True, include={self.kind})
            return {self.kind: dumped.get(self.kind, {})}


class SampleConfig(BaseModel):
    """How a row becomes a sample: the column giving ``__key__`` and field name -> column(s)."""

    model_config = _FORBID
    key: str = Field(min_length=1)
    fields: dict[str, str | list[str]] = Field(json_schema_extra={"minProperties": 1})

    @field_validator("fields")
    @classmethod
    def _field_names(cls, value: dict[str, str | list[str]]) -> dict[str, str | list[str]]:
        if not value:
            raise ValueError("needs at least one field, e.g. {png: image, cls: label}")
        for name, columns in value.items():
            if not name or "/" in name or name.startswith("__"):
                raise ValueError(
                    f"bad field name {name!r}: must be non-empty, without '/', not starting "
                    "with '__'"
                )
            if isinstance(columns, list) and not columns:
                raise ValueError(f"field {name!r} lists no columns")
        return value


class Pipeline(BaseModel):
    """A whole pipeline file: source, cleaning stages, sample layout, splits and sharding."""

    model_config = _FORBID
    name: str = Field(json_schema_extra={"pattern": NAME_PATTERN})
    source: SourceConfig
    stages: list[StageConfig] = []
    sample: SampleConfig
    shards: ShardConfig = ShardConfig()
    splits: SplitsConfig | None = None
    max_rejected: float = Field(default=0.01, ge=0, le=1)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.match(NAME_PATTERN, value):
            raise ValueError(
                "a name is 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        return value

    @field_validator("stages")
    @classmethod
    def _one_tokenize(cls, stages: list[StageConfig]) -> list[StageConfig]:
        if sum(stage.kind == "tokenize" for stage in stages) > 1:
            raise ValueError("a pipeline tokenizes once: keep one tokenize stage")
        return stages

    @field_validator("shards")
    @classmethod
    def _token_fields(cls, shards: ShardConfig, info: pydantic.ValidationInfo) -> ShardConfig:
        sample = info.data.get("sample")
        problem = token_fields_problem(shards.format, sample.fields if sample else None)
        if problem is not None:
            raise ValueError(problem)
        return shards

    def canonical(self) -> dict[str, Any]:
        """The config as it goes into the version id: JSON types, without execution-only source
        options."""
        # without splits, the dump a pipeline had before splits existed: its version ids stay
        data = self.model_dump(mode="json", exclude={"splits"} if self.splits is None else None)
        data["source"]["options"] = {
            k: v for k, v in data["source"]["options"].items() if k not in EXECUTION_OPTIONS
        }
        # only class_folders sources have classes: other ids stay as they were
        if self.source.classes is None:
            del data["source"]["classes"]
        elif isinstance(self.source.classes, ClassesFile):
            data["source"]["classes"] = {"from": self.source.classes.from_}
        data["stages"] = [stage.canonical() for stage in self.stages]
        return data


# a message that starts with a key of the pipeline file: stages[2].filter, sample.fields.x
_LEADING_KEY = re.compile(r"((?:stages\[\d+\]|sample|splits|source|shards)[\w.\[\]]*): ")


@dataclass(frozen=True)
class LoadedPipeline:
    """A parsed pipeline and where its file is (source paths are relative to ``base_dir``)."""

    pipeline: Pipeline
    path: str
    base_dir: str
    # key path (stages[2].map) -> line
    lines: Mapping[str, int] = dataclasses.field(default_factory=dict)
    shown: str = ""  # the file as the user named it, for messages

    def where(self, key: str) -> str:
        """``FILE:LINE: key`` for messages about ``key`` (a dotted path such as
        ``stages[2].map``)."""
        line = self.lines.get(key)
        while line is None and ("." in key or "[" in key):
            key_up = (
                key.rsplit(".", 1)[0] if key.rfind(".") > key.rfind("[") else key.rsplit("[", 1)[0]
            )
            line, key = self.lines.get(key_up), key_up
        name = self.shown or self.path
        return f"{name}:{line}" if line is not None else name

    def located(self, error: Exception) -> Exception:
        """``error`` with ``FILE:LINE`` in front when it is a ConfigError that begins with a key of
        this file (``stages[2].filter: ...``, raised on the data) and names no place yet."""
        key = _LEADING_KEY.match(str(error))
        if type(error) is not ConfigError or key is None:
            return error
        return ConfigError(f"{self.where(key.group(1))}: {error}")


def stage_path(i: int, kind: str) -> str:
    """The label of stage ``i`` in counts, quarantine and messages: ``stages[2].filter``."""
    return f"stages[{i}].{kind}"


def load_pipeline(path: str | os.PathLike) -> LoadedPipeline:
    """Read and validate a pipeline YAML file; NotFoundError if it is missing, ConfigError if it is
    wrong."""
    where = os.fspath(path)
    if not os.path.isfile(where):
        raise NotFoundError(f"{where}: pipeline file not found; check the path")
    try:
        with open(where, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    absolute = os.path.abspath(where)
    pipeline, lines = _parse(text, where)
    return LoadedPipeline(
        pipeline,
        absolute,
        os.path.dirname(absolute),
        {dotted(k): v for k, v in lines.items()},
        where,
    )


def parse_pipeline(text: str, where: str) -> Pipeline:
    """Validate pipeline YAML ``text``; ``where`` names the file in messages. Every problem is one
    line of the error."""
    return _parse(text, where)[0]


def _parse(text: str, where: str) -> tuple[Pipeline, dict[tuple, int]]:
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = ": ".join(
            p for p in (getattr(e, "context", None), getattr(e, "problem", None)) if p
        ) or str(e)
        start = getattr(e, "context_mark", None)
        if start is not None and mark is not None and start.line != mark.line:
            problem += f" (it starts on line {start.line + 1})"
        raise ConfigError(f"{where}{line}: invalid YAML: {problem}; fix the syntax") from None
    if data is None:
        raise ConfigError(
            f"{where}: the file is empty; a pipeline needs at least name, source and sample"
        )
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}:1: the top level must be a mapping with keys "
            f"{', '.join(Pipeline.model_fields)}"
        )
    lines: dict[tuple, int] = {}
    problems = key_lines(node, (), lines)
    try:
        pipeline = Pipeline.model_validate(data)
    except pydantic.ValidationError as e:
        problems += [describe(err, lines, Pipeline) for err in e.errors(include_url=False)]
    if problems:
        # pydantic reports each member of a union on its own
        merged: dict[tuple[int, str, str], list[str]] = {}
        for line, path, msg, shown in problems:
            merged.setdefault((line, path, shown), []).append(msg)
        raise ConfigError(
            "\n".join(
                f"{where}:{line}: {path}: {' or '.join(dict.fromkeys(msgs))}{shown}"
                for (line, path, shown), msgs in sorted(merged.items())
            )
        )
    return pipeline, lines


def pipeline_json_schema() -> dict[str, Any]:
    """The JSON Schema of a pipeline file (``schemas/pipeline.schema.json`` holds a copy)."""
    schema = Pipeline.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "datapipe pipeline"
    return schema


if __name__ == "__main__":
    sys.stdout.write(json.dumps(pipeline_json_schema(), indent=2, sort_keys=True) + "\n")
