"""`datapipe schema`: a pipeline's columns, types and their origins before building (from the
source's sample, run through the stages here), and a built version's fields. In process, but the
smoke test of the installed command (as test_installed_command.py has for the others)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from helpers.cli import datapipe_in_process, datapipe_installed

PIPELINE = """\
name: posts
source:
  path: {path}
  format: {fmt}
  options: {options}
stages:
{stages}sample:
  key: id
  fields: {{txt: text, likes: likes}}
"""

SCORE = """\
def add_score(frame):
    frame["score"] = frame["likes"] * 0.5
    return frame
"""


def posts_csv(rows: int, bare_cr: bool = False) -> str:
    lines = ["id,text,is_retweet,likes"]
    for i in range(rows):
        text = f"one\rtwo {i}" if bare_cr and i in (2, 5) else f"post {i}"
        lines.append(f"{i},{text},{'True' if i % 4 == 0 else 'False'},{i % 10}")
    return "\n".join(lines) + "\n"


def project(tmp_path: Path, data, stages: str = "", options: str = "{}", fmt: str = "csv") -> Path:
    name = f"raw/posts.{fmt}"
    (tmp_path / "raw").mkdir(exist_ok=True)
    (tmp_path / name).write_bytes(data.encode() if isinstance(data, str) else data)
    (tmp_path / "score.py").write_text(SCORE)
    (tmp_path / "pipeline.yaml").write_text(
        PIPELINE.format(
            path=name, fmt=fmt, options=options, stages=textwrap.indent(stages, "  ") or "  []\n"
        )
    )
    return tmp_path


def schema(root: Path, *args: str) -> subprocess.CompletedProcess:
    return datapipe_in_process("schema", *args, cwd=root)


def as_json(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


STAGES = """\
- cast: {likes: int8}
- map: score:add_score
- filter: "is_retweet == False"
"""


def test_each_column_has_its_type_and_where_it_came_from(tmp_path):
    root = project(tmp_path, posts_csv(40), STAGES, "{dtype: {is_retweet: string}}")
    out = as_json(schema(root, "pipeline.yaml", "--json"))
    assert [(c["name"], c["type"], c["from"], c["stage"], c["was"]) for c in out["columns"]] == [
        ("id", "int64", "inferred", None, None),
        ("text", "string", "inferred", None, None),
        ("is_retweet", "string", "declared", None, None),
        ("likes", "int8", "cast", "stages[0].cast", "int64"),
        ("score", "float64", "added", "stages[1].map", None),
    ]
    size = (root / "raw/posts.csv").stat().st_size
    assert out["source"] == {
        "format": "csv",
        "files": 1,
        "sample": {"file": "raw/posts.csv", "bytes": size, "rows": 40, "set_aside": 0},
    }
    # the text 'False' is no bool: the filter drops every row of the sample
    assert [(s["stage"], s["in"], s["out"]) for s in out["stages"]] == [
        ("stages[0].cast", 40, 40),
        ("stages[1].map", 40, 40),
        ("stages[2].filter", 40, 0),
    ]
    assert out["stages"][1]["added"] == ["score"] and out["error"] is None
    assert {f["field"]: (f["kinds"], f["columns"]) for f in out["fields"]} == {
        "__key__": ([], ["id"]),
        "txt": ([], ["text"]),
        "likes": ([], ["likes"]),
    }


def test_the_text_table_reads_at_a_glance(tmp_path):
    root = project(tmp_path, posts_csv(40), STAGES, "{dtype: {is_retweet: string}}")
    out = schema(root, "pipeline.yaml")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    size = (root / "raw/posts.csv").stat().st_size
    assert lines[:2] == [
        "posts: csv source, 1 file",
        f"types inferred from raw/posts.csv: the whole file {size} B, 40 rows",
    ]
    assert "is_retweet  string   declared in source.options.dtype" in lines
    assert "likes       int8     cast by stages[0].cast (was int64)" in lines
    assert "score       float64  added by stages[1].map" in lines
    assert 'stages[2].filter "is_retweet == False"  40 in, 0 out (40 dropped, 100%)' in lines
    assert "stages[1].map score:add_score           40 in, 40 out (adds score)" in lines


def test_a_bare_cr_in_early_rows_leaves_the_types_of_the_columns(tmp_path):
    root = project(tmp_path, posts_csv(40, bare_cr=True), '- filter: "is_retweet == False"\n')
    out = as_json(schema(root, "pipeline.yaml", "--json"))
    types = {c["name"]: c["type"] for c in out["columns"]}
    assert types == {"id": "int64", "text": "string", "is_retweet": "bool", "likes": "int64"}
    assert out["source"]["sample"]["rows"] == 40
    assert [(s["in"], s["out"]) for s in out["stages"]] == [(40, 30)]
    kinds = {f["field"]: f["kinds"] for f in out["fields"]}
    assert kinds == {"__key__": ["str"], "txt": ["str"], "likes": ["int"]}


def test_a_large_source_is_sampled_not_read(tmp_path):
    root = project(tmp_path, posts_csv(120_000))
    out = as_json(schema(root, "pipeline.yaml", "--json"))
    sample = out["source"]["sample"]
    assert sample["bytes"] <= 1 << 20 < (root / "raw/posts.csv").stat().st_size
    assert 0 < sample["rows"] < 120_000
    assert (
        "types inferred from raw/posts.csv: its first 1.0 MB"
        in schema(root, "pipeline.yaml").stdout
    )


def test_a_stage_that_fails_on_the_sample_is_the_error_after_the_columns(tmp_path):
    root = project(tmp_path, posts_csv(10), '- filter: "retweet == False"\n')
    out = schema(root, "pipeline.yaml")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "is_retweet  bool" in out.stdout
    assert out.stderr.startswith(
        "error: pipeline.yaml:7: stages[0].filter: cannot evaluate 'retweet == False'"
    )
    failed = schema(root, "pipeline.yaml", "--json")
    assert failed.returncode == 2
    assert json.loads(failed.stdout)["error"].startswith("stages[0].filter: cannot evaluate")


def test_a_parquet_source_shows_the_files_own_types(tmp_path):
    frame = pd.DataFrame({"id": ["a", "b"], "text": ["x", "y"], "likes": [1, 2]})
    (tmp_path / "raw").mkdir()
    frame.to_parquet(tmp_path / "raw/posts.parquet")
    root = project(tmp_path, (tmp_path / "raw/posts.parquet").read_bytes(), fmt="parquet")
    out = as_json(schema(root, "pipeline.yaml", "--json"))
    assert [(c["name"], c["type"], c["from"]) for c in out["columns"]] == [
        ("id", "string", "source"),
        ("text", "string", "source"),
        ("likes", "int64", "source"),
    ]
    assert out["source"]["sample"] == {
        "file": "raw/posts.parquet",
        "bytes": None,
        "rows": 2,
        "set_aside": 0,
    }


def test_a_built_dataset_shows_its_fields_kinds_and_columns(tmp_path):
    root = project(tmp_path, posts_csv(20))
    built = datapipe_in_process("build", "pipeline.yaml", "--out", "store", cwd=root)
    assert built.returncode == 0, built.stderr
    out = as_json(schema(root, "store/posts", "--json"))
    assert (out["dataset"], out["samples"], out["shard_format"]) == ("posts", 20, "webdataset")
    assert out["fields"] == [
        {"field": "__key__", "kinds": ["str"], "columns": ["id"]},
        {"field": "likes", "kinds": ["int"], "columns": ["likes"]},
        {"field": "txt", "kinds": ["str"], "columns": ["text"]},
    ]
    text = schema(root, "store/posts@latest")
    assert text.returncode == 0 and "txt      str   text" in text.stdout.splitlines()


@pytest.mark.parametrize(
    ("target", "code", "message"),
    [
        ("nothere.yaml", 3, "error: nothere.yaml: pipeline file not found"),
        ("store/nothere", 3, "error: "),
        ("pipeline", 3, "error: "),
    ],
)
def test_a_missing_pipeline_or_dataset_is_one_line(tmp_path, target, code, message):
    out = schema(tmp_path, target)
    assert out.returncode == code and out.stderr.startswith(message), out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1
    if not target.endswith(".yaml"):
        assert "takes a pipeline file (a .yaml path) or a dataset" in out.stderr


def test_the_installed_command(tmp_path):
    root = project(tmp_path, posts_csv(10))
    out = datapipe_installed("schema", "pipeline.yaml", "--json", cwd=root)
    assert out.returncode == 0, out.stderr
    assert [c["name"] for c in json.loads(out.stdout)["columns"]] == [
        "id",
        "text",
        "is_retweet",
        "likes",
    ]
    missing = datapipe_installed("schema", "missing.yaml", cwd=root)
    assert missing.returncode == 3 and missing.stderr.startswith("error: missing.yaml")


def test_the_preview_starts_no_cluster_and_imports_no_dask(tmp_path):
    root = project(tmp_path, posts_csv(10), STAGES)
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from datapipe.cli.main import cli\n"
        "out = CliRunner().invoke(cli, ['schema', 'pipeline.yaml'])\n"
        "print(out.exit_code, 'dask' in sys.modules, 'distributed' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert out.stdout.split() == ["0", "False", "False"], out.stderr
