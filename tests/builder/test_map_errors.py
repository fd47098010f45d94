"""A map function that raises: the message shows the user's own frames (not datapipe's, pandas' or
Dask's) and the source file and row of the record that raised, in the text and in `build --json`."""

from __future__ import annotations

import json
import pickle
import textwrap

import pandas as pd
import pytest
from helpers.cli import datapipe_in_process as run
from helpers.cli import on_session_cluster

from datapipe.builder.map_failure import failing_row
from datapipe.errors import UserCodeError

PIPELINE = """\
    name: cars
    source: {path: raw/cars.csv, format: csv, options: {blocksize: 4KB}}
    stages:
      - dropna: {}
      - map: parsing:parse
    sample: {key: id, fields: {cyl: cylinders}}
    shards: {max_bytes: 64KB}
    """

MODULE = """\
def to_int(value):
    return int(value)


def parse(df):
    df["cylinders"] = df["cylinders"].map(to_int)
    return df
"""

BAD_ROW = 700  # in a later partition of the file: its row counts the partitions before it


def project(tmp_path):
    (tmp_path / "pipeline.yaml").write_text(textwrap.dedent(PIPELINE))
    (tmp_path / "parsing.py").write_text(MODULE)
    rows = [f"c{i:05d},{'four' if i == BAD_ROW else 4 + i % 5}" for i in range(1, 1001)]
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "cars.csv").write_text("id,cylinders\n" + "\n".join(rows) + "\n")


def test_a_raising_map_names_the_record_and_the_users_frames(tmp_path, scheduler):
    project(tmp_path)
    cluster = on_session_cluster(scheduler)  # a real Dask worker raises; the error crosses back
    out = run("build", "pipeline.yaml", *cluster, cwd=tmp_path)
    assert out.returncode == 8 and "Traceback" not in out.stderr
    module = str(tmp_path / "parsing.py")
    expected = [
        "error: stages[1].map: parsing:parse raised ValueError: invalid literal for int() with "
        "base 10: 'four'",
        f'  record: raw/cars.csv row {BAD_ROW}: {{"id": "c{BAD_ROW:05d}", "cylinders": "four"}}',
        "  your code (most recent call last):",
        f"    {module}:6 in parse",
        '      df["cylinders"] = df["cylinders"].map(to_int)',
        f"    {module}:2 in to_int",
        "      return int(value)",
    ]  # pandas' Series.map between the two frames is not the user's code
    assert out.stderr.splitlines()[-7:] == expected, out.stderr
    # built in this process (a small source), where the working directory is the project's
    out = run("build", "pipeline.yaml", cwd=tmp_path)
    assert out.returncode == 8 and out.stderr.splitlines()[-7:] == expected, out.stderr

    out = run("build", "pipeline.yaml", "--json", *cluster, cwd=tmp_path)
    error = json.loads(out.stdout.splitlines()[-1])["error"]
    assert out.returncode == 8 and error["exit_code"] == 8 and error["kind"] == "UserCodeError"
    assert (error["source"], error["row"]) == ("raw/cars.csv", BAD_ROW)
    assert json.loads(error["record"]) == {"id": f"c{BAD_ROW:05d}", "cylinders": "four"}
    assert [(f["file"], f["line"], f["function"]) for f in error["traceback"]] == [
        (module, 6, "parse"),
        (module, 2, "to_int"),
    ]
    assert error["message"] == out.stderr.split("error: ", 1)[1].strip()


def test_a_failure_only_rows_together_cause_names_no_record():
    def needs_two(df: pd.DataFrame) -> pd.DataFrame:
        if df["x"].sum() > 10:
            raise ValueError("too much")
        return df

    frame = pd.DataFrame({"x": [6, 6, 6]}, index=[10, 11, 12])
    assert failing_row(needs_two, frame, ValueError) is None
    frame = pd.DataFrame({"x": [1, 2, 30, 4]}, index=[10, 11, 12, 13])
    assert failing_row(needs_two, frame, ValueError) == 12


def test_the_error_crosses_processes_whole():
    e = UserCodeError("s: m:f raised KeyError: 'a'", (("/p/m.py", 3, "f", "x['a']"),), "a.csv", 7)
    back = pickle.loads(pickle.dumps(e))
    assert str(back) == str(e) and back.details() == e.details() and back.exit_code == 8
    with pytest.raises(UserCodeError, match=r"record: a.csv row 7\n"):
        raise back
