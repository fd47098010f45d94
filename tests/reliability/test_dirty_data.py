"""Dirty raw data through `datapipe build`: each case ends in quarantined rows with reasons (and counts that add
up) or in a clear error naming the file; never a silent loss, never a traceback."""

import os

import pandas as pd
import pytest
from conftest import datapipe_cli, last_json

PIPELINE = """\
name: dirty
source: {{path: {path}, format: {fmt}{options}}}
sample: {{key: id, fields: {{cls: n}}}}
max_rejected: 0.9
"""


def build(tmp_path, files: dict[str, bytes], fmt="csv", options="", path="raw/*"):
    for name, data in files.items():
        (tmp_path / "raw").mkdir(exist_ok=True)
        (tmp_path / "raw" / name).write_bytes(data)
    (tmp_path / "p.yaml").write_text(PIPELINE.format(path=path, fmt=fmt, options=options))
    return datapipe_cli("build", "p.yaml", "--out", str(tmp_path / "store"), "--workers", "1", "--json", cwd=tmp_path)


def quarantine(tmp_path, summary) -> pd.DataFrame:
    return pd.read_parquet(tmp_path / "store" / "dirty" / "versions" / summary["version"] / "rejected.parquet")


def accounted(summary) -> None:
    stages = summary["stages"]
    assert all(s["in"] == s["out"] + s["dropped"] + s["rejected"] for s in stages)
    assert stages[0]["in"] == summary["samples"] + sum(s["dropped"] + s["rejected"] for s in stages)


CASES = {
    "wrong column counts": (b"id,n\na,1\nb,2,3\nc\nd,4\n", {"expected 2 fields, saw 3", "expected 2 fields, saw 1"}),
    "broken quoting": (b'id,n\na,1\nb,"2\nc,3\nd,4\n', {"a quote that is never closed"}),
    "invalid UTF-8": (b"id,n\na,1\nb\xff\xfe,2\nc,3\n", {"invalid utf-8 bytes"}),
    "values of the wrong type": (b"id,n\na,1\nb,two\nc,3\n", {"is not int64"}),
    "missing and duplicate keys": (b"id,n\na,1\n,2\na,3\nc,4\n", {"has no value", "duplicate sample key"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_dirty_rows_are_quarantined_with_their_reason(tmp_path, case):
    data, reasons = CASES[case]
    options = ", options: {dtype: {n: int64}}" if case == "values of the wrong type" else ""
    out = build(tmp_path, {"d.csv": data}, options=options)
    assert out.returncode == 0, out.stderr
    summary = last_json(out)
    accounted(summary)
    got = " | ".join(quarantine(tmp_path, summary).reason).lower()
    assert all(r.lower() in got for r in reasons), got
    assert summary["rejected"] >= 1


@pytest.mark.parametrize("files, message, code", [
    ({"empty.csv": b""}, "no rows in raw/empty.csv", 8),
    ({"header.csv": b"id,n\n"}, "no rows in raw/header.csv", 8),
    ({}, "matches no files", 3),
])
def test_inputs_without_rows_are_clear_errors(tmp_path, files, message, code):
    out = build(tmp_path, files)
    assert out.returncode == code and message in out.stderr


def test_an_unreadable_source_file_is_named(tmp_path):
    (tmp_path / "raw").mkdir()
    os.symlink(tmp_path / "nowhere.csv", tmp_path / "raw" / "gone.csv")  # listed, but cannot be opened
    out = build(tmp_path, {}, path="raw/gone.csv")
    assert out.returncode == 3 and "raw/gone.csv" in out.stderr


def test_a_single_100_mb_field_is_one_sample(tmp_path):
    big = b"x" * (100 << 20)
    out = build(tmp_path, {"big.csv": b"id,n\na,1\nb," + big + b"\n"}, options=", options: {dtype: {n: string}}")
    assert out.returncode == 0, out.stderr
    summary = last_json(out)
    assert summary["samples"] == 2 and summary["bytes"] > 100 << 20


def test_bad_json_lines_are_quarantined(tmp_path):
    out = build(tmp_path, {"d.jsonl": b'{"id": "a", "n": 1}\n{"id": "b", "n": \n[1, 2]\n{"id": "c", "n": 3}\n'},
                fmt="jsonl")
    assert out.returncode == 0, out.stderr
    summary = last_json(out)
    accounted(summary)
    reasons = list(quarantine(tmp_path, summary).reason)
    assert len(reasons) == 2
    assert any("not valid JSON" in r for r in reasons) and any("expected a JSON object" in r for r in reasons)
