"""`datapipe rejected`: a version's or a failed build's rejected rows grouped by reason, each with
an example and its file, line and row; the max_rejected error's top reasons; no pandas needed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.cli import datapipe_in_process

from datapipe.versioning.store import Store

# 3 values that are not numbers (one behind a quoted newline), 2 below min, 1 with a field too
# many: 6 of 9 rows rejected, for 3 reasons
CARS = (
    'name,note,mpg\nford,"big\ncar",x\nfiat,small,12\nvw,"a\nb\nc",y\nkia,ok,-1\n'
    "audi,ok,-3\nbmw,ok,z\nseat,ok,9,9\nmini,ok,30\nopel,ok,20\n"
)
PIPELINE = """\
    name: cars
    source: {{path: cars.csv, format: csv, options: {{dtype: {{mpg: int64}}}}}}
    stages:
      - validate: {{mpg: {{min: 0}}}}
{extra}    sample: {{key: name, fields: {{cls: mpg}}}}
    max_rejected: {max_rejected}
    """


def project(tmp_path: Path, max_rejected: float = 0.9, extra: str = "") -> Path:
    (tmp_path / "cars.csv").write_text(CARS)
    text = PIPELINE.format(max_rejected=max_rejected, extra=textwrap.indent(extra, " " * 6))
    (tmp_path / "cars.yaml").write_text(textwrap.dedent(text))
    return tmp_path


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return datapipe_in_process(*args, cwd=cwd)


def test_a_versions_rejected_rows_grouped_by_reason(tmp_path):
    root = project(tmp_path)
    built = run("build", "cars.yaml", "--out", "store", cwd=root)
    assert built.returncode == 0, built.stderr
    out = run("rejected", "store/cars", cwd=root)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("cars@") and lines[0].endswith(
        "(9 rows read): 6 rejected rows, 3 reasons"
    )
    # the largest group first; a reason's literals that differ between its rows shown as '…'
    assert lines[1] == (
        "3  source: column 'mpg': … is not int64 (set source.options.dtype.mpg to read it as "
        "another type)"
    )
    assert lines[2].startswith("   e.g. cars.csv line 2, row 1: column 'mpg': 'x' is not int64")
    assert lines[3] == '   {"name": "ford", "note": "big\\ncar", "mpg": "x"}'
    assert lines[4:7] == [
        "2  stages[0].validate: mpg: … is below min 0",
        "   e.g. cars.csv line 8, row 4: mpg: -1 is below min 0",
        '   {"name": "kia", "note": "ok", "mpg": -1}',
    ]
    # a reason the same for every row of its group is shown once; the raw text of the record
    assert lines[7:10] == [
        "1  source: expected 3 fields, saw 4",
        "   e.g. cars.csv line 11, row 7",
        "   seat,ok,9,9",
    ]

    top = run("rejected", "store/cars", "--top", "1", "--stage", "source", cwd=root)
    assert top.stdout.splitlines()[0].endswith("4 rejected rows of stage source, 2 reasons")
    assert top.stdout.splitlines()[-1] == "... and 1 more reason (1 row): --top 2"

    data = json.loads(run("rejected", "store/cars", "--json", cwd=root).stdout)
    assert (data["dataset"], data["rows"], data["rows_read"], data["reasons_total"]) == (
        "cars",
        6,
        9,
        3,
    )
    assert data["failed_build"] is None and data["file"].endswith("rejected.parquet")
    assert [(g["stage"], g["count"]) for g in data["reasons"]] == [
        ("source", 3),
        ("stages[0].validate", 2),
        ("source", 1),
    ]
    example = data["reasons"][0]["example"]
    assert (example["source"], example["line"], example["row"]) == ("cars.csv", 2, 1)
    assert [g["example"]["line"] for g in data["reasons"]] == [2, 8, 11]


def test_bad_arguments_are_one_line_with_the_choices(tmp_path):
    root = project(tmp_path)
    assert run("build", "cars.yaml", "--out", "store", cwd=root).returncode == 0
    out = run("rejected", "store/cars", "--stage", "stages[9].cast", cwd=root)
    assert out.returncode == 2 and out.stderr == (
        "error: --stage stages[9].cast: no row was rejected by that stage (stages with rejected "
        "rows: source, stages[0].validate)\n"
    )
    out = run("rejected", "store/cars@latest", "--failed", cwd=root)
    assert out.returncode == 2 and "leave out the @REF" in out.stderr
    out = run("rejected", "store/cars", "--failed", cwd=root)
    assert out.returncode == 3 and "no failed build left its rejected rows" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_build_over_max_rejected_names_its_top_reasons_and_keeps_its_rows(tmp_path):
    root = project(tmp_path, max_rejected=0.1)
    (root / "cars.csv").write_text(CARS + "fiat,ok,5\ngolf,ok,\n")  # 2 more reasons: 5 in all
    failed = run("build", "cars.yaml", "--out", "store", cwd=root)
    assert failed.returncode == 8
    error = failed.stderr[failed.stderr.index("error: ") :]  # after the build's progress lines
    lines = error.splitlines()
    assert lines[0] == (
        "error: 8 of 11 rows rejected (72.73%), over max_rejected 10.00%; no version was made. "
        "The top reasons:"
    )
    assert lines[1].startswith("  3  source: column 'mpg': … is not int64")
    assert lines[1].endswith("(e.g. cars.csv line 2, row 1)")
    assert lines[2] == (
        "  2  stages[0].validate: mpg: … is below min 0 (e.g. cars.csv line 8, row 4)"
    )
    assert lines[3].startswith("  1  source: expected 3 fields, saw 4 (e.g. cars.csv line 11,")
    assert lines[4] == "  and 2 more rows for 2 other reasons"
    assert lines[5].startswith("Every rejected row, with its reason: `datapipe rejected store/cars")
    assert lines[6].startswith("(kept in ") and lines[7] == "Rows per stage:"
    assert max(len(line) for line in lines if not line.startswith("(kept in ")) < 160
    assert Store(str(root / "store")).versions("cars") == []

    shown = run("rejected", "store/cars", "--failed", "--json", cwd=root)
    data = json.loads(shown.stdout)
    assert data["rows"] == 8 and data["version"] is None and data["failed_build"]
    assert [g["count"] for g in data["reasons"]] == [3, 2, 1, 1, 1]
    # the file the error named reads the same; the dataset has no version, so the hint points there
    path = lines[6].removeprefix("(kept in ").removesuffix(")")
    assert json.loads(run("rejected", path, "--json", cwd=root).stdout)["rows"] == 8
    no_version = run("rejected", "store/cars", cwd=root)
    assert no_version.returncode == 3
    assert no_version.stderr.rstrip().endswith("`datapipe rejected store/cars --failed`")


def test_a_build_left_with_no_samples_keeps_its_rejected_rows(tmp_path):
    root = project(tmp_path, extra='- filter: "mpg > 100"\n')
    failed = run("build", "cars.yaml", "--out", "store", cwd=root)
    assert failed.returncode == 8 and "no samples left" in failed.stderr
    assert "`datapipe rejected store/cars --failed`" in failed.stderr
    out = run("rejected", "store/cars", "--failed", cwd=root)
    assert out.returncode == 0, out.stderr
    assert ": 6 rejected rows, 3 reasons" in out.stdout.splitlines()[0]
    assert out.stdout.splitlines()[0].startswith("cars, failed build ")


def test_a_quarantine_written_before_lines_reads_with_rows(tmp_path):
    table = pa.table(
        {
            "stage": ["source", "source"],
            "reason": ["expected 2 fields, saw 3", "expected 2 fields, saw 4"],
            "source": ["a.csv", "a.csv"],
            "row": pa.array([4, 9], type=pa.int64()),
            "data": ["1,2,3", "1,2,3,4"],
        }
    )
    pq.write_table(table, tmp_path / "old.parquet")
    out = run("rejected", "old.parquet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1:3] == [
        "2  source: expected 2 fields, saw …",
        "   e.g. a.csv row 4: expected 2 fields, saw 3",
    ]
    (tmp_path / "not.parquet").write_bytes(b"PAR1 but not really")
    bad = run("rejected", "not.parquet", cwd=tmp_path)
    assert bad.returncode == 6 and "not a readable quarantine file" in bad.stderr


def test_reading_needs_no_pandas(tmp_path):
    """The command in a fresh interpreter where importing pandas fails."""
    root = project(tmp_path)
    assert run("build", "cars.yaml", "--out", "store", cwd=root).returncode == 0
    code = (
        "import sys\n"
        "class NoPandas:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pandas':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoPandas())\n"
        "from datapipe.cli.main import main\n"
        "sys.argv = ['datapipe', 'rejected', 'store/cars', '--json']\n"
        "main()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rows"] == 6


@pytest.mark.parametrize("top", ["0", "x"])
def test_top_takes_a_positive_number(tmp_path, top):
    out = run("rejected", "store/cars", "--top", top, cwd=tmp_path)
    assert out.returncode == 2 and "--top" in out.stderr
