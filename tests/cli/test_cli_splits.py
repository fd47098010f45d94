"""`datapipe info` and `datapipe diff` of versions with splits; manifests whose splits disagree with
their shards."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from helpers.cli import datapipe_in_process

from datapipe.builder.config import load_pipeline
from datapipe.builder.run import Execution, build
from datapipe.loader.dataset import open_dataset
from datapipe.versioning.store import Store

PIPELINE = """\
name: rows
source: {{path: raw/rows.csv, format: csv}}
sample: {{key: id, fields: {{cls: label}}}}
shards: {{max_samples: 30}}
splits: {{fractions: {fractions}}}
"""


def build_rows(
    root: Path, client, ids, fractions="{train: 0.8, val: 0.2}", labels=lambda i: i % 10
) -> str:
    (root / "raw").mkdir(parents=True, exist_ok=True)
    (root / "raw/rows.csv").write_text(
        "id,label\n" + "".join(f"r{i:04d},{labels(i)}\n" for i in ids)
    )
    (root / "pipeline.yaml").write_text(textwrap.dedent(PIPELINE.format(fractions=fractions)))
    loaded, store = load_pipeline(root / "pipeline.yaml"), Store(str(root / "store"))
    return build(loaded, store, execution=Execution(client=client)).url


def split_keys(url: str, split: str) -> set[str]:
    ds = open_dataset(url, split=split)
    return {ds[i]["__key__"] for i in range(len(ds))}


def test_info_shows_each_split_with_its_samples_and_shards(tmp_path, in_process):
    url = build_rows(tmp_path, in_process, range(200))
    m = open_dataset(url).manifest
    out = datapipe_in_process("info", url)
    assert out.returncode == 0, out.stderr
    s = m.splits.samples
    line = (
        f"  splits by the sample key (splits.seed 0): train {s['train']} (0.8, "
        f"{len(m.split_shards('train'))} shards), "
        f"val {s['val']} (0.2, {len(m.split_shards('val'))} shards)"
    )
    assert line in out.stdout.splitlines()
    # the lineage's seed is the shard shuffle's, named as the pipeline file names it
    assert any(
        ln.startswith("  lineage: ") and ", not shuffled, " in ln for ln in out.stdout.splitlines()
    )
    info = json.loads(datapipe_in_process("info", url, "--json").stdout)
    assert info["splits"] == {
        "by": None,
        "seed": 0,
        "splits": {
            name: {
                "fraction": m.splits.fractions[name],
                "samples": s[name],
                "shards": len(m.split_shards(name)),
            }
            for name in ("train", "val")
        },
    }


def test_diff_reports_per_split_and_the_samples_that_moved(tmp_path, in_process):
    a = build_rows(tmp_path, in_process, range(200))
    b = build_rows(tmp_path, in_process, range(20, 250), labels=lambda i: (i % 10) + (i == 100))
    out = datapipe_in_process("diff", a, b)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].endswith("50 added, 20 removed, 1 changed, 179 unchanged")
    for split in ("train", "val"):
        before, after = split_keys(a, split), split_keys(b, split)
        common = before & after
        assert (
            f"  split {split}: {len(after - before)} added, {len(before - after)} removed, "
            f"{int('r0100' in common)} changed, "
            f"{len(common) - int('r0100' in common)} unchanged" in lines
        )
    assert "+ r0249" in lines and "- r0000" in lines and "~ r0100" in lines
    assert not any(x.startswith(">") for x in lines)
    d = json.loads(datapipe_in_process("diff", a, b, "--json").stdout)
    assert d["splits"]["val"]["added"] == sorted(split_keys(b, "val") - split_keys(a, "val"))
    # other fractions move samples between splits: diff names them
    c = build_rows(
        tmp_path,
        in_process,
        range(20, 250),
        fractions="{train: 0.5, val: 0.5}",
        labels=lambda i: (i % 10) + (i == 100),
    )
    moved = sorted(split_keys(b, "train") & split_keys(c, "val"))
    lines = datapipe_in_process("diff", b, c).stdout.splitlines()
    assert moved and [x for x in lines if x.startswith(">")] == [
        f"> {k} (moved to split val)" for k in moved
    ]


@pytest.mark.broken_manifests
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda raw: raw["shards"][0].update(split="dev"),
            "field 'shards[0].split' is 'dev', not one of train, val",
        ),
        (
            lambda raw: raw["splits"]["samples"].update(val=1),
            "field 'splits.samples.val' is 1 but its shards add up to",
        ),
        (
            lambda raw: raw.pop("splits"),
            "field 'shards[0].split' names a split, but there is no 'splits'",
        ),
        (
            lambda raw: raw["splits"]["fractions"].update(val="half"),
            "field 'splits.fractions.val': expected a number",
        ),
    ],
)
def test_a_manifest_whose_splits_disagree_with_its_shards_is_malformed(
    tmp_path, in_process, change, message
):
    url = build_rows(tmp_path, in_process, range(100))
    store = Store(str(tmp_path / "store"))
    path = Path(store.path("rows", "versions", store.resolve("rows"), "manifest.json"))
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw))
    out = datapipe_in_process("info", url)
    assert out.returncode == 6 and out.stderr.startswith(f"error: {path}: malformed manifest: "), (
        out.stderr
    )
    assert message in out.stderr
