"""Pipeline file models: parsing, canonical form, JSON schema, and errors that name file, line and
key."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from datapipe.builder.config import (
    STAGE_KINDS,
    TYPE_NAMES,
    ColumnRule,
    DedupeArgs,
    DropnaArgs,
    FillnaArgs,
    ShardConfig,
    load_pipeline,
    parse_pipeline,
    pipeline_json_schema,
    stage_path,
)
from datapipe.builder.source.options import EXECUTION_OPTIONS
from datapipe.builder.source.registry import check_source_options
from datapipe.errors import ConfigError, NotFoundError
from datapipe.storage.byte_size import parse_size

SCHEMA_FILE = Path(__file__).parents[2] / "schemas" / "pipeline.schema.json"

EXAMPLE = """\
name: digits                    # dataset name
source:
  path: raw/digits-*.csv        # fsspec URL or glob, relative to this file
  format: csv                   # csv | parquet | jsonl | files
  options: {blocksize: 1MB}
stages:
  - dropna: {columns: [label]}
  - fillna: {values: {note: ""}}
  - filter: "label >= 0"
  - dedupe: {columns: [id]}
  - cast: {label: int64}
  - map: mypkg.clean:fix_rows
  - validate:
      id: {type: string, nullable: false}
      label: {type: int64, min: 0, max: 9}
sample:
  key: id
  fields: {png: image, cls: label, json: [a, b]}
shards:
  format: webdataset
  max_bytes: 64MB
  max_samples: null
  shuffle_seed: null
max_rejected: 0.01
"""


def edited(line: int, text: str | None) -> str:
    """The example with 1-based ``line`` replaced by ``text`` (None: deleted)."""
    lines = EXAMPLE.splitlines()
    lines[line - 1 : line] = [] if text is None else [text]
    return "\n".join(lines) + "\n"


def config_error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_pipeline(text, "pipelines/x.yaml")
    return str(info.value)


# --- the schema file ------------------------------------------------------------------------------


def test_schema_file_matches_models():
    expected = json.dumps(pipeline_json_schema(), indent=2, sort_keys=True) + "\n"
    assert SCHEMA_FILE.read_text() == expected, (
        "schemas/pipeline.schema.json is out of date with "
        "datapipe/builder/config.py; regenerate it with "
        "`python -m datapipe.builder.config > schemas/pipeline.schema.json`"
    )


def test_schema_is_valid_and_accepts_the_example():
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["title"]
    jsonschema.validate(yaml.safe_load(EXAMPLE), schema)
    assert {"type": "string"} in [
        {"type": s["type"]}
        for s in schema["$defs"]["ShardConfig"]["properties"]["max_bytes"]["anyOf"]
    ]


@pytest.mark.parametrize(
    "line, text",
    [
        (25, "colour: red"),
        (21, "  max_bytes: lots"),
        (10, "  - dedup: {columns: [id]}"),
        (9, '  - {filter: "label >= 0", dedupe: {}}'),
        (1, "name: 'digits v2'"),
        (18, "  fields: {}"),
    ],
)
def test_schema_rejects_what_the_models_reject(line, text):
    schema = json.loads(SCHEMA_FILE.read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(yaml.safe_load(edited(line, text)), schema)
    config_error(edited(line, text))


# --- a valid pipeline -----------------------------------------------------------------------------


def test_example_parses_with_every_stage_kind():
    pipeline = parse_pipeline(EXAMPLE, "x.yaml")
    assert pipeline.name == "digits"
    assert pipeline.source.path == "raw/digits-*.csv" and pipeline.source.format == "csv"
    assert pipeline.source.options == {"blocksize": "1MB"}
    # the image, tokenize and near_dedupe stages parse in tests/builder/test_image_stage.py,
    # test_tokenize.py and test_near_dedupe.py: their lines here would move every line below
    assert [s.kind for s in pipeline.stages] == [
        k for k in STAGE_KINDS if k not in ("image", "tokenize", "near_dedupe")
    ]
    dropna, fillna, filter_, dedupe, cast, map_, validate = (s.args for s in pipeline.stages)
    assert dropna == DropnaArgs(columns=["label"])
    assert fillna == FillnaArgs(values={"note": ""})
    assert filter_ == "label >= 0"
    assert dedupe == DedupeArgs(columns=["id"])
    assert cast == {"label": "int64"}
    assert map_ == "mypkg.clean:fix_rows"
    assert validate == {
        "id": ColumnRule(type="string", nullable=False),
        "label": ColumnRule(type="int64", min=0, max=9),
    }
    assert pipeline.sample.key == "id"
    assert pipeline.sample.fields == {"png": "image", "cls": "label", "json": ["a", "b"]}
    assert pipeline.shards == ShardConfig(format="webdataset", max_bytes=64_000_000)
    assert pipeline.max_rejected == 0.01
    assert [stage_path(i, s.kind) for i, s in enumerate(pipeline.stages)][2] == "stages[2].filter"


def test_defaults():
    pipeline = parse_pipeline(
        "name: d\nsource: {path: in.jsonl, format: jsonl}\nsample: {key: k, fields: {txt: t}}\n",
        "x.yaml",
    )
    assert pipeline.stages == [] and pipeline.source.options == {}
    assert pipeline.shards == ShardConfig()
    assert (pipeline.shards.format, pipeline.shards.max_bytes) == ("webdataset", 64_000_000)
    assert pipeline.shards.max_samples is None and pipeline.shards.shuffle_seed is None
    assert pipeline.max_rejected == 0.01


def test_canonical_is_deterministic_and_excludes_execution_options():
    canonical = parse_pipeline(EXAMPLE, "x.yaml").canonical()
    assert json.dumps(canonical, sort_keys=True) == json.dumps(
        parse_pipeline(EXAMPLE, "y.yaml").canonical(), sort_keys=True
    )
    assert canonical["source"] == {"path": "raw/digits-*.csv", "format": "csv", "options": {}}
    assert canonical["stages"] == [
        {"dropna": {"columns": ["label"]}},
        {"fillna": {"values": {"note": ""}}},
        {"filter": "label >= 0"},
        {"dedupe": {"columns": ["id"]}},
        {"cast": {"label": "int64"}},
        {"map": "mypkg.clean:fix_rows"},
        {
            "validate": {
                "id": {"type": "string", "nullable": False},
                "label": {"type": "int64", "min": 0, "max": 9},
            }
        },
    ]
    assert canonical["shards"] == {
        "format": "webdataset",
        "max_bytes": 64_000_000,
        "max_samples": None,
        "shuffle_seed": None,
    }
    assert canonical["name"] == "digits" and canonical["max_rejected"] == 0.01
    json.dumps(canonical)  # plain JSON types only


def test_canonical_ignores_how_the_input_is_split_but_not_other_options():
    base = parse_pipeline(EXAMPLE, "x.yaml").canonical()
    for options in ("{blocksize: 64MB}", "{files_per_partition: 3}", "{}"):
        assert parse_pipeline(edited(5, f"  options: {options}"), "x.yaml").canonical() == base
    other = parse_pipeline(edited(5, "  options: {blocksize: 1MB, sep: ';'}"), "x.yaml").canonical()
    assert other["source"]["options"] == {"sep": ";"}
    assert EXECUTION_OPTIONS == {"blocksize", "files_per_partition", "storage_options"}
    # a Parquet partition is one row group: no option pretends to group them
    assert (
        check_source_options("parquet", {"row_groups_per_partition": 2})[0]
        == "row_groups_per_partition"
    )


@pytest.mark.parametrize(
    "stage", ["dropna: {}", "dropna: null", "dropna:", "dropna: {columns: null}"]
)
def test_empty_args_mean_any_column(stage):
    pipeline = parse_pipeline(edited(7, f"  - {stage}"), "x.yaml")
    assert pipeline.stages[0].args == DropnaArgs(columns=None)
    assert pipeline.canonical()["stages"][0] == {"dropna": {}}


@pytest.mark.parametrize("stage", ["dedupe: {}", "dedupe: null", "dedupe:"])
def test_empty_dedupe_means_all_columns(stage):
    pipeline = parse_pipeline(edited(10, f"  - {stage}"), "x.yaml")
    assert pipeline.stages[3].kind == "dedupe" and pipeline.stages[3].args == DedupeArgs()
    assert pipeline.canonical()["stages"][3] == {"dedupe": {}}


def test_same_meaning_same_canonical():
    spelled_out = edited(14, "      id: {type: string, nullable: false, min: null, pattern: null}")
    assert (
        parse_pipeline(spelled_out, "x.yaml").canonical()
        == parse_pipeline(EXAMPLE, "x.yaml").canonical()
    )


def test_type_names():
    assert TYPE_NAMES == (
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
    )


def test_load_pipeline_resolves_paths(tmp_path):
    path = tmp_path / "pipelines" / "digits.yaml"
    path.parent.mkdir()
    path.write_text(EXAMPLE)
    loaded = load_pipeline(path)
    assert loaded.pipeline == parse_pipeline(EXAMPLE, "x.yaml")
    assert loaded.path == str(path) and loaded.base_dir == str(path.parent)


def test_load_pipeline_missing_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(NotFoundError, match="nope.yaml"):
        load_pipeline(missing)


def test_load_pipeline_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(edited(22, '  max_samples: "ten"'))
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    assert str(info.value).startswith(f"{path}:22: shards.max_samples: ")


# --- sizes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, size",
    [
        (1, 1),
        (4096, 4096),
        ("1", 1),
        ("123B", 123),
        ("64MB", 64_000_000),
        ("100 MB", 100_000_000),
        ("512KiB", 512 * 1024),
        ("1.5GB", 1_500_000_000),
        ("2GiB", 2 * 1024**3),
        ("1TB", 10**12),
        ("1TiB", 2**40),
        ("10KB", 10_000),
        ("3MiB", 3 * 2**20),
        ("64mb", 64_000_000),
        (" 7 kb ", 7000),
        ("0.5KiB", 512),
    ],
)
def test_sizes(value, size):
    assert parse_size(value) == size
    assert ShardConfig(max_bytes=value).max_bytes == size


@pytest.mark.parametrize(
    "value",
    ["", "MB", "64 MBs", "64M", "-1MB", "1e6", "1.5B", "0", 0, -5, True, "sixty", None, "1,000"],
)
def test_bad_sizes(value):
    with pytest.raises(ValueError):
        parse_size(value)
    with pytest.raises(ValueError):  # pydantic's ValidationError is a ValueError
        ShardConfig(max_bytes=value)


# --- mistakes: each names file, line and key path -------------------------------------------------


@pytest.mark.parametrize(
    "line, text, expected, why",
    [
        (
            25,
            "colour: red",
            "pipelines/x.yaml:25: colour: unknown key 'colour'; use one of: name, source",
            "top-level key",
        ),
        (
            3,
            "  paht: raw/*.csv",
            "pipelines/x.yaml:3: source.paht: unknown key 'paht'",
            "unknown nested key",
        ),
        (
            14,
            "      id: {type: string, nulable: false}",
            "pipelines/x.yaml:14: stages[6].validate.id.nulable: unknown key",
            "unknown key in a column rule",
        ),
        (
            10,
            "  - dedup: {columns: [id]}",
            "pipelines/x.yaml:10: stages[3].dedup: unknown stage 'dedup'; use one "
            "of: dropna, fillna, filter, dedupe, near_dedupe, cast, "
            "map, validate",
            "unknown stage",
        ),
        (
            9,
            '  - {filter: "label >= 0", dedupe: {}}',
            "pipelines/x.yaml:9: stages[2]: a stage is a mapping with exactly one "
            "key, got keys filter, dedupe",
            "two keys in one stage",
        ),
        (
            9,
            "  - dedupe",
            "pipelines/x.yaml:9: stages[2]: a stage is a mapping with exactly one key",
            "bare stage name",
        ),
        (
            22,
            '  max_samples: "ten"',
            "pipelines/x.yaml:22: shards.max_samples: Input should be a valid integer",
            "type",
        ),
        (
            22,
            "  max_samples: 0",
            "pipelines/x.yaml:22: shards.max_samples: Input should be greater than or equal to 1",
            "range",
        ),
        (
            24,
            "max_rejected: 2",
            "pipelines/x.yaml:24: max_rejected: Input should be less than or equal to 1",
            "range",
        ),
        (
            7,
            "  - dropna: {columns: label}",
            "pipelines/x.yaml:7: stages[0].dropna.columns: Input should be a valid list",
            "type inside a stage",
        ),
        (
            9,
            '  - filter: "label >="',
            "pipelines/x.yaml:9: stages[2].filter: not a valid expression",
            "bad filter",
        ),
        (
            9,
            "  - filter:",
            "pipelines/x.yaml:9: stages[2].filter: 'filter' needs a value",
            "empty filter",
        ),
        (
            8,
            "  - fillna: {}",
            "pipelines/x.yaml:8: stages[1].fillna.values: required key is missing",
            "fillna values",
        ),
        (
            12,
            "  - map: mypkg.clean.fix_rows",
            "pipelines/x.yaml:12: stages[5].map: expected 'module.path:function', "
            "e.g. 'mypkg.clean:fix_rows'",
            "map spec",
        ),
        (
            11,
            "  - cast: {label: int65}",
            "pipelines/x.yaml:11: stages[4].cast.label: Input should be 'int8'",
            "cast type",
        ),
        (
            21,
            "  max_bytes: 64 MBs",
            "pipelines/x.yaml:21: shards.max_bytes: not a size: use an integer "
            "number of bytes or a string like '64MB'",
            "bad size",
        ),
        (
            21,
            "  max_bytes: 0",
            "pipelines/x.yaml:21: shards.max_bytes: must be at least 1 byte",
            "zero size",
        ),
        (
            14,
            '      id: {type: string, pattern: "[a-"}',
            "pipelines/x.yaml:14: stages[6].validate.id.pattern: not a valid regular expression",
            "bad regex",
        ),
        (
            15,
            "      label: {type: int64, min: 9, max: 0}",
            "pipelines/x.yaml:15: stages[6].validate.label: min is greater than max",
            "min > max",
        ),
        (
            1,
            "name: 'digits v2'",
            "pipelines/x.yaml:1: name: a name is 1-128 letters, digits",
            "bad name",
        ),
        (1, "name: -digits", "pipelines/x.yaml:1: name: a name is", "name starting with '-'"),
        (
            4,
            "  format: xlsx",
            "pipelines/x.yaml:4: source.format: Input should be 'csv', 'parquet', "
            "'jsonl', 'files' or 'class_folders'",
            "source format",
        ),
        (
            18,
            "  fields: {}",
            "pipelines/x.yaml:18: sample.fields: needs at least one field",
            "empty fields",
        ),
        (
            18,
            "  fields: {png/x: image}",
            "pipelines/x.yaml:18: sample.fields: bad field name 'png/x'",
            "field with /",
        ),
        (
            18,
            "  fields: {__key__: id}",
            "pipelines/x.yaml:18: sample.fields: bad field name '__key__'",
            "field __",
        ),
        (
            18,
            "  fields: {png: 3}",
            "pipelines/x.yaml:18: sample.fields.png: Input should be a valid string",
            "field type",
        ),
        (
            20,
            "  format: zip",
            "pipelines/x.yaml:20: shards.format: Input should be 'webdataset', 'tfrecord', "
            "'tokens' or 'megatron'",
            "shards",
        ),
        (
            17,
            None,
            "pipelines/x.yaml:16: sample.key: required key is missing; add it",
            "missing key",
        ),
        (
            20,
            "  format: webdataset: x",
            "pipelines/x.yaml:20: invalid YAML: mapping values are not allowed here",
            "YAML syntax",
        ),
        (
            5,
            "  options: {blocksize: 1MB",
            "pipelines/x.yaml:6: invalid YAML:",
            "unclosed flow mapping",
        ),
        (
            23,
            "  max_samples: 5",
            "pipelines/x.yaml:23: shards.max_samples: duplicate key (first on line 22)",
            "duplicate",
        ),
    ],
)
def test_mistakes_name_line_and_key(line, text, expected, why):
    message = config_error(edited(line, text))
    assert expected in message, f"{why}: {message}"


def test_every_error_is_reported_one_per_line():
    text = edited(22, '  max_samples: "ten"')
    text = text.replace("  - map: mypkg.clean:fix_rows", "  - map: fix_rows")
    text += "colour: red\n"
    lines = config_error(text).splitlines()
    assert [line.split(": ")[0:2] for line in lines] == [
        ["pipelines/x.yaml:12", "stages[5].map"],
        ["pipelines/x.yaml:22", "shards.max_samples"],
        ["pipelines/x.yaml:25", "colour"],
    ]


def test_missing_top_level_sections():
    message = config_error("name: digits\n")
    assert "pipelines/x.yaml:1: source: required key is missing; add it" in message
    assert "pipelines/x.yaml:1: sample: required key is missing; add it" in message


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", "pipelines/x.yaml: the file is empty"),
        ("# only a comment\n", "pipelines/x.yaml: the file is empty"),
        ("- name: digits\n", "pipelines/x.yaml:1: the top level must be a mapping"),
        ("just a string\n", "pipelines/x.yaml:1: the top level must be a mapping"),
        ("name: !!python/object/apply:os.system [echo hi]\n", "pipelines/x.yaml:1: invalid YAML"),
    ],
)
def test_not_a_pipeline(text, expected):
    assert config_error(text).startswith(expected)
