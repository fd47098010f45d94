"""`datapipe rejected` on a store on S3 (moto on loopback): a version's quarantine and a failed
build's; and a near_dedupe stage checked against a version there."""

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


def test_a_local_build_is_checked_against_a_version_on_s3(s3, tmp_path):
    from benchmarks.near_corpus import generated

    texts = generated(40, seed=5)
    rows = [json.dumps({"id": f"e{i}", "text": t}) for i, t in enumerate(texts)]
    (tmp_path / "eval.jsonl").write_text("\n".join(rows) + "\n")
    stage = "stages:\n  - near_dedupe: {field: text%s}\nsample: {key: id, fields: {text: text}}\n"
    pipeline = tmp_path / "eval.yaml"
    pipeline.write_text("name: evalset\nsource: {path: eval.jsonl, format: jsonl}\n" + stage % "")
    remote = build(load_pipeline(pipeline), Store(f"s3://{s3['bucket']}/evals"))
    train = [texts[3], texts[7] + " one more", *generated(10, seed=6)]
    rows = [json.dumps({"id": f"t{i}", "text": t}) for i, t in enumerate(train)]
    (tmp_path / "train.jsonl").write_text("\n".join(rows) + "\n")
    against = f", against: [s3://{s3['bucket']}/evals/evalset]"
    pipeline.write_text(
        "name: train\nsource: {path: train.jsonl, format: jsonl}\n" + stage % against
    )
    local = Store(str(tmp_path / "store"))
    result = build(load_pipeline(pipeline), local)
    assert result.manifest.samples == 10
    out = datapipe_in_process("rejected", f"{local.url}/train", "--json")
    reasons = sorted(g["reason"] for g in json.loads(out.stdout)["reasons"])
    label = f"s3://{s3['bucket']}/evals/evalset@{remote.manifest.version[:12]}"
    assert [r.split(" (")[0] for r in reasons] == [
        f"near-duplicate of {label}#e3",
        f"near-duplicate of {label}#e7",
    ]
