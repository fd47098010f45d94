"""Rows the stages drop: a warning in the build summary past half of a stage's rows (text and
--json), with example rows placed in their source file; and the stage named when one drops every
row. The posts CSV holds bare CRs in early rows, as the real one did."""

import json

import pytest
from helpers.cli import datapipe_in_process
from test_schema_sample import ROWS, posts

PIPELINE = """\
name: posts
source:
  path: raw/posts.csv
  format: csv
  options: {options}
stages:
  - dropna: {{columns: [likes]}}
  - filter: "{expr}"
sample:
  key: id
  fields: {{txt: text, likes: likes}}
"""


def build(project, expr: str, options: str = "{}", *args: str):
    project.write("raw/posts.csv", posts())
    project.pipeline(PIPELINE.format(expr=expr, options=options))
    return datapipe_in_process("build", "pipeline.yaml", "--out", "store", *args, cwd=project.root)


def test_the_posts_filter_keeps_the_posts_that_are_no_retweets(project):
    """The user's pipeline: every row read whole, none rejected, is_retweet a bool."""
    out = build(project, "is_retweet == False", "{}", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.splitlines()[-1])
    kept = sum(1 for i in range(ROWS) if i % 3)
    assert (summary["samples"], summary["rejected"], summary["warnings"]) == (kept, 0, [])


@pytest.mark.parametrize("blocksize", ["{}", "{blocksize: 500}"])
def test_a_stage_that_drops_most_rows_is_named_with_rows_it_dropped(project, blocksize):
    out = build(project, "likes > 14", blocksize, "--json")
    assert out.returncode == 0, out.stderr
    (warning,) = json.loads(out.stdout.splitlines()[-1])["warnings"]
    dropped = sum(1 for i in range(ROWS) if i % 17 <= 14)
    assert warning["stage"] == "stages[1].filter" and warning["where"] == "pipeline.yaml:8"
    assert (warning["in"], warning["dropped"]) == (ROWS, dropped)
    # the first rows of the file, placed by their row in it whatever the partitions
    assert [(e["source"], e["row"]) for e in warning["examples"]] == [
        ("raw/posts.csv", 1),
        ("raw/posts.csv", 2),
        ("raw/posts.csv", 3),
    ]
    assert json.loads(warning["examples"][1]["data"])["text"] == "post 1"
    assert warning["message"].startswith(
        f'pipeline.yaml:8: stages[1].filter "likes > 14" dropped {dropped:,} of {ROWS:,} rows'
    )
    text = build(project, "likes > 14", blocksize)
    assert text.returncode == 0, text.stderr
    assert f"warning: {warning['message']}\n" in text.stdout
    assert '  e.g. raw/posts.csv line 4, row 3: {"id": 2, "text": "post 2"' in text.stdout


def test_a_rebuild_that_reuses_its_partitions_warns_the_same(project):
    first = build(project, "likes > 14", "{blocksize: 500}", "--json")
    again = datapipe_in_process(
        "build", "pipeline.yaml", "--out", "store", "--json", cwd=project.root
    )
    assert again.returncode == 0, again.stderr
    a, b = (json.loads(o.stdout.splitlines()[-1]) for o in (first, again))
    assert b["incremental"]["partitions"]["measured"] == 0
    assert a["warnings"] == b["warnings"] and len(a["warnings"]) == 1


def test_a_stage_that_drops_half_or_less_warns_nothing(project):
    out = build(project, "likes > 7", "{}", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["warnings"] == []
    assert "warning: pipeline.yaml" not in build(project, "likes > 7").stdout


def test_the_stage_that_drops_every_row_is_named_with_what_to_check(project):
    """is_retweet read as text, as the bare CRs once made it: the filter drops every row."""
    out = build(project, "is_retweet == False", "{dtype: {is_retweet: string}}")
    assert out.returncode == 8 and "Traceback" not in out.stderr
    assert (
        f'\nerror: pipeline.yaml:8: stages[1].filter "is_retweet == False" dropped all {ROWS:,} '
        "rows that reached it; no samples left"
    ) in out.stderr, out.stderr
    assert (
        '  raw/posts.csv line 2, row 1: {"id": 0, "text": "post 0", "is_retweet": "True"'
        in out.stderr
    )
    assert "`datapipe schema pipeline.yaml`" in out.stderr
    assert f"stages[1].filter: {ROWS} in, 0 out, {ROWS} dropped" in out.stderr


def test_an_example_row_shows_the_start_of_a_long_value(project):
    project.write("raw/long.csv", "id,text\n" + "".join(f"{i},{'x' * 500}\n" for i in range(9)))
    project.pipeline(
        PIPELINE.replace("raw/posts.csv", "raw/long.csv")
        .replace("  - dropna: {{columns: [likes]}}\n", "")
        .replace(", likes: likes", "")
        .format(expr="id > 6", options="{}")
    )
    out = datapipe_in_process("build", "pipeline.yaml", "--json", cwd=project.root)
    assert out.returncode == 0, out.stderr
    (warning,) = json.loads(out.stdout.splitlines()[-1])["warnings"]
    assert json.loads(warning["examples"][0]["data"]) == {"id": 0, "text": "x" * 77 + "..."}
