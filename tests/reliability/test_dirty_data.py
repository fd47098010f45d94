"""Dirty raw data through `datapipe build`: each case ends in quarantined rows with reasons (and
counts that add up) or in a clear error naming the file; never a silent loss, never a traceback.

The builds run the command in process, as `datapipe build` runs a source this small: on threads, no
cluster.
The 100 MB field goes through the session's Dask cluster (--scheduler), between worker processes;
one case found by the passes runs with a cluster of its own (--workers 1), as a user's larger build
does."""

import os

import pandas as pd
import pytest
from conftest import last_json
from helpers.cli import datapipe_in_process, on_session_cluster

PIPELINE = """\
name: dirty
source: {{path: {path}, format: {fmt}{options}}}
sample: {{key: id, fields: {{cls: n}}}}
max_rejected: 0.9
"""


@pytest.fixture(scope="module")
def scheduler(dask_client) -> str:
    """The address of the session's Dask scheduler."""
    return dask_client.scheduler.address


def build(
    tmp_path,
    files: dict[str, bytes],
    fmt="csv",
    options="",
    path="raw/*",
    scheduler: str | None = None,
    own_cluster: bool = False,
):
    """`datapipe build --json` of the dirty pipeline, in process: on threads, on ``scheduler``, or
    with an embedded cluster of its own."""
    for name, data in files.items():
        (tmp_path / "raw").mkdir(exist_ok=True)
        (tmp_path / "raw" / name).write_bytes(data)
    (tmp_path / "p.yaml").write_text(PIPELINE.format(path=path, fmt=fmt, options=options))
    where = (
        ("--workers", "1") if own_cluster else on_session_cluster(scheduler) if scheduler else ()
    )
    return datapipe_in_process(
        "build", "p.yaml", "--out", str(tmp_path / "store"), *where, "--json", cwd=tmp_path
    )


def quarantine(tmp_path, summary) -> pd.DataFrame:
    return pd.read_parquet(
        tmp_path / "store" / "dirty" / "versions" / summary["version"] / "rejected.parquet"
    )


def accounted(summary) -> None:
    stages = summary["stages"]
    assert all(s["in"] == s["out"] + s["dropped"] + s["rejected"] for s in stages)
    assert stages[0]["in"] == summary["samples"] + sum(s["dropped"] + s["rejected"] for s in stages)


CASES = {
    "wrong column counts": (
        b"id,n\na,1\nb,2,3\nc\nd,4\n",
        {"expected 2 fields, saw 3", "expected 2 fields, saw 1"},
    ),
    "broken quoting": (b'id,n\na,1\nb,"2\nc,3\nd,4\n', {"a quote that is never closed"}),
    "invalid UTF-8": (b"id,n\na,1\nb\xff\xfe,2\nc,3\n", {"invalid utf-8 bytes"}),
    "values of the wrong type": (b"id,n\na,1\nb,two\nc,3\n", {"is not int64"}),
    "missing and duplicate keys": (
        b"id,n\na,1\n,2\na,3\nc,4\n",
        {"has no value", "duplicate sample key"},
    ),
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


@pytest.mark.parametrize(
    "files, message, code, own_cluster",
    [
        ({"empty.csv": b""}, "no rows in raw/empty.csv", 8, False),
        # found by the passes, cluster running
        ({"header.csv": b"id,n\n"}, "no rows in raw/header.csv", 8, True),
        ({}, "matches no files", 3, False),
    ],
)
def test_inputs_without_rows_are_clear_errors(tmp_path, files, message, code, own_cluster):
    out = build(tmp_path, files, own_cluster=own_cluster)
    assert out.returncode == code and message in out.stderr


def test_an_unreadable_source_file_is_named(tmp_path):
    (tmp_path / "raw").mkdir()
    # listed, but cannot be opened
    os.symlink(tmp_path / "nowhere.csv", tmp_path / "raw" / "gone.csv")
    out = build(tmp_path, {}, path="raw/gone.csv")  # found before any cluster starts
    assert out.returncode == 3 and "raw/gone.csv" in out.stderr


def test_a_single_100_mb_field_is_one_sample(tmp_path, scheduler):
    big = b"x" * (100 << 20)
    out = build(
        tmp_path,
        {"big.csv": b"id,n\na,1\nb," + big + b"\n"},
        options=", options: {dtype: {n: string}}",
        scheduler=scheduler,
    )
    assert out.returncode == 0, out.stderr
    summary = last_json(out)
    assert summary["samples"] == 2 and summary["bytes"] > 100 << 20


def test_bad_json_lines_are_quarantined(tmp_path):
    out = build(
        tmp_path,
        {
            "d.jsonl": b'{"id": "a", "n": 1}\n{"id": "b", "n": \n[1, 2]\n{"id": "c", "n": 3}\n'
            # a lone surrogate's escape (no text can hold it), then a pair's (an emoji: kept)
            b'{"id": "d", "n": 4, "t": "\\ud800 alone"}\n'
            b'{"id": "e", "n": 5, "t": "\\ud83d\\ude00"}\n'
        },
        fmt="jsonl",
    )
    assert out.returncode == 0, out.stderr
    summary = last_json(out)
    accounted(summary)
    rows = quarantine(tmp_path, summary)
    reasons = list(rows.reason)
    assert len(reasons) == 3 and summary["samples"] == 3
    assert any("not valid JSON" in r for r in reasons) and any(
        "expected a JSON object" in r for r in reasons
    )
    lone = rows[rows.reason.str.contains("lone surrogate")]
    assert list(lone.row) == [5] and "(\\ud800)" in lone.reason.iloc[0]


NAN_PIPELINE = """\
name: dirty
source: {{path: raw/*, format: csv{options}}}
stages:
  - validate: {{x: {{type: float64, nullable: false}}}}
sample: {{key: {key}, fields: {{x: x}}}}
shards: {{format: {fmt}}}
max_rejected: 0.9
"""


@pytest.mark.parametrize(
    "case, data, key, options, reasons",
    [
        (
            "NaN in a non-nullable float",
            b"id,x\na,0.5\nb,NaN\nc,\nd,nan\ne,1.5\n",
            "id",
            "",
            ["x: missing value (nullable: false)"] * 3,
        ),
        (
            "NaN key",
            b"id,x\na,0.5\nNaN,1.0\n,2.0\nd,1.5\n",
            "id",
            ", options: {dtype: {id: string}}",
            ["has no value", "has no value"],
        ),
        # tfrecord: a float key holds a '.', which WebDataset keys cannot
        ("NaN in a float key", b"k,x\n1.5,0.5\nnan,1.0\n2.5,2.0\n", "k", "", ["has no value"]),
    ],
)
def test_nan_values_are_quarantined_with_their_reason(tmp_path, case, data, key, options, reasons):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "d.csv").write_bytes(data)
    fmt = "tfrecord" if case == "NaN in a float key" else "webdataset"
    (tmp_path / "p.yaml").write_text(NAN_PIPELINE.format(key=key, options=options, fmt=fmt))
    out = datapipe_in_process(
        "build", "p.yaml", "--out", str(tmp_path / "store"), "--json", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    summary = last_json(out)
    accounted(summary)
    rows = data.count(b"\n") - 1
    got = sorted(quarantine(tmp_path, summary).reason)
    assert len(got) == len(reasons) and summary["samples"] == rows - len(reasons), got
    for reason in reasons:
        assert any(reason in r for r in got), got
    url = f"{tmp_path}/store/dirty"
    import datapipe

    keys = [
        k
        for b in datapipe.Loader(url, batch_size=1, num_workers=0, shuffle=False)
        for k in b["__key__"]
    ]
    assert len(keys) == summary["samples"] and not any(
        k.lower() in ("nan", "", "none", "<na>") for k in keys
    )


def test_a_directory_where_a_source_file_is_expected_is_named(tmp_path):
    # Tests run as root here, where chmod 000 does not stop a read; a directory named like the
    # source file cannot be read either way (the chmod case is below, for non-root runs).
    (tmp_path / "raw" / "b.csv").mkdir(parents=True)
    out = build(tmp_path, {"a.csv": b"id,n\na,1\n"}, path="raw/b.csv")
    assert out.returncode == 3 and "raw/b.csv" in out.stderr and out.stderr.startswith("error: "), (
        out.stderr
    )


def test_a_directory_among_matched_source_files_is_named(tmp_path):
    (tmp_path / "raw" / "b.csv").mkdir(parents=True)
    out = build(tmp_path, {"a.csv": b"id,n\na,1\n"}, path="raw/*.csv")
    # either the directory is named as unreadable or it is not taken as a source; never a silent row
    # loss
    if out.returncode == 0:
        assert last_json(out)["samples"] == 1
    else:
        assert "raw/b.csv" in out.stderr and out.stderr.startswith("error: "), out.stderr


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root reads files whatever their mode; the directory case covers it"
)
def test_an_unreadable_source_file_is_named_chmod(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.csv").write_bytes(b"id,n\na,1\n")
    os.chmod(tmp_path / "raw" / "a.csv", 0)
    out = build(tmp_path, {}, path="raw/a.csv")
    assert out.returncode != 0 and "raw/a.csv" in out.stderr and out.stderr.startswith("error: ")
