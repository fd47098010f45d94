"""`datapipe rejected` on a store on S3 (moto on loopback): a version's quarantine and a failed
build's."""

import json

import pytest
from helpers.cli import datapipe_in_process

from datapipe.builder.config import load_pipeline
from datapipe.builder.run import build
from datapipe.errors import BuildError
from datapipe.versioning.store import Store

pytestmark = pytest.mark.s3


def test_rejected_rows_of_a_version_and_of_a_failed_build_on_s3(s3, tmp_path):
    (tmp_path / "a.jsonl").write_text(
        '{"id": "a", "v": 1}\n\n{"id": "b", "v": -1}\nnot json\n{"id": "c", "v": 3}\n'
    )
    pipeline = tmp_path / "rows.yaml"
    pipeline.write_text(
        "name: rows\nsource: {path: a.jsonl, format: jsonl}\n"
        "stages:\n  - validate: {v: {min: 0}}\n"
        "sample: {key: id, fields: {cls: v}}\nmax_rejected: 0.5\n"
    )
    url = f"s3://{s3['bucket']}/rejected"
    build(load_pipeline(pipeline), Store(url))
    out = datapipe_in_process("rejected", f"{url}/rows", "--json", env=s3["env"])
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["rows"] == 2 and data["file"].startswith(f"{url}/rows/versions/")
    assert sorted((g["stage"], g["example"]["line"]) for g in data["reasons"]) == [
        ("source", 4),
        ("stages[0].validate", 3),
    ]

    pipeline.write_text(pipeline.read_text().replace("max_rejected: 0.5", "max_rejected: 0.1"))
    with pytest.raises(BuildError, match=f"`datapipe rejected {url}/rows --failed`"):
        build(load_pipeline(pipeline), Store(url))
    out = datapipe_in_process("rejected", f"{url}/rows", "--failed", env=s3["env"])
    assert out.returncode == 0, out.stderr
    assert (
        out.stdout.startswith("rows, failed build ")
        and ": 2 rejected rows, 2 reasons" in (out.stdout.splitlines()[0])
    )
    assert "   e.g. a.jsonl line 4, row 3" in out.stdout
