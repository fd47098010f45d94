"""Mistakes only the data shows, answered one step closer to the fix: a misspelt column gets the
near name wherever a column is named, and a validate rule of the wrong kind names the field and the
column's type."""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers.cli import datapipe_in_process as run

COLUMNS = "(columns: Name, Cylinders, Horsepower, Origin)"


def cars(tmp_path, stages: str, fields: str = "{cyl: Cylinders}", extra: str = "") -> str:
    rows = [
        {"Name": f"car {i}", "Cylinders": 4 + i % 3 * 2, "Horsepower": 60 + i, "Origin": "usa"}
        for i in range(40)
    ]
    (tmp_path / "cars.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pipeline = f"""\
        name: cars
        source: {{path: cars.jsonl, format: jsonl}}
        stages:
{textwrap.indent(textwrap.dedent(stages), " " * 10)}
        sample: {{key: Name, fields: {fields}}}
        {extra}
        """
    (tmp_path / "cars.yaml").write_text(textwrap.dedent(pipeline))
    out = run("build", "cars.yaml", cwd=tmp_path)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    return out


@pytest.mark.parametrize(
    ("stages", "fields", "message"),
    [
        (
            '- filter: "cylinders > 3"',
            "{cyl: Cylinders}",
            "stages[0].filter: cannot evaluate 'cylinders > 3': no column 'cylinders'; "
            f"did you mean 'Cylinders'? {COLUMNS}",
        ),
        (
            "- filter: \"Cylinders > 3 and horsepower < 100 and Name != 'origin'\"",
            "{cyl: Cylinders}",
            'stages[0].filter: cannot evaluate "Cylinders > 3 and horsepower < 100 and Name != '
            "'origin'\": no column 'horsepower'; did you mean 'Horsepower'? " + COLUMNS,
        ),
        (
            "- cast: {horsepowr: float64}",
            "{cyl: Cylinders}",
            "stages[0].cast.horsepowr: no column 'horsepowr'; did you mean 'Horsepower'? "
            + COLUMNS,
        ),
        (
            "- validate: {origin: {values: [usa, europe]}}",
            "{cyl: Cylinders}",
            f"stages[0].validate.origin: no column 'origin'; did you mean 'Origin'? {COLUMNS}",
        ),
        (
            "- dedupe: {columns: [name]}",
            "{cyl: Cylinders}",
            f"stages[0].dedupe.columns: no column 'name'; did you mean 'Name'? {COLUMNS}",
        ),
        (
            "- dropna: {columns: [Cylinder, Horsepowers]}",
            "{cyl: Cylinders}",
            "stages[0].dropna.columns: no column 'Cylinder', 'Horsepowers'; did you mean "
            f"'Cylinders' for 'Cylinder', 'Horsepower' for 'Horsepowers'? {COLUMNS}",
        ),
        (
            "- fillna: {values: {horsepower: 0}}",
            "{cyl: Cylinders}",
            "stages[0].fillna.values.horsepower: no column 'horsepower'; did you mean "
            f"'Horsepower'? {COLUMNS}",
        ),
        (
            "- dropna: {}",
            "{cyl: cylinders, hp: Horsepower}",
            "sample.fields.cyl: no column 'cylinders' after the stages; did you mean 'Cylinders'? "
            + COLUMNS,
        ),
        (
            '- validate: {Horsepower: {min: "40"}}',
            "{cyl: Cylinders}",
            "stages[0].validate.Horsepower.min: '40' is text, and column 'Horsepower' is Int64, "
            "numbers: write min: 40 without quotes",
        ),
        (
            "- validate: {Name: {max: 10}}",
            "{cyl: Cylinders}",
            "stages[0].validate.Name.max: 10 is a number, but column 'Name' is object, text; cast "
            "it to a number in a stage before this one (cast: {Name: float64})",
        ),
        (
            "- validate: {Cylinders: {values: ['4', '6']}}",
            "{cyl: Cylinders}",
            "stages[0].validate.Cylinders.values: ['4', '6'] are text, but column 'Cylinders' is "
            "Int64, numbers; write them without quotes",
        ),
    ],
)
def test_a_column_mistake_gets_the_near_name_or_the_columns_type(tmp_path, stages, fields, message):
    out = cars(tmp_path, stages, fields)
    # placed at the line of the key it names: the stage (line 4) or the sample (line 5)
    line = 4 if message.startswith("stages") else 5
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines()[-1] == f"error: cars.yaml:{line}: {message}", out.stderr


def test_splits_by_a_misspelt_column_gets_the_near_name(tmp_path):
    out = cars(tmp_path, "- dropna: {}", extra="splits: {fractions: {a: 0.5, b: 0.5}, by: origin}")
    assert out.returncode == 2 and out.stderr.splitlines()[-1].endswith(
        f"splits.by: no column 'origin' after the stages; did you mean 'Origin'? {COLUMNS}; name "
        "one of them, or leave 'by' out to split by the sample key"
    ), out.stderr


def test_a_number_bound_on_numbers_and_a_far_name_are_as_before(tmp_path):
    out = cars(tmp_path, '- filter: "weight > 3"')
    assert out.stderr.splitlines()[-1] == (
        "error: cars.yaml:4: stages[0].filter: cannot evaluate 'weight > 3': no column 'weight' "
        + COLUMNS
    )
    (tmp_path / "ok.yaml").write_text(
        (tmp_path / "cars.yaml")
        .read_text()
        .replace('filter: "weight > 3"', "validate: {Horsepower: {min: 40}}")
    )
    out = run("build", "ok.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
