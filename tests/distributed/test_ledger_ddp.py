"""Real DDP, 3 gloo ranks x 2 DataLoader workers over a mix: every batch is what the step ledger
says, across a resume and with skips; skipped steps are delivered by no rank."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sample_data import make_dataset

import datapipe

SCRIPT = Path(__file__).with_name("ledger_run.py")
TORCHRUN = Path(sys.executable).with_name("torchrun")


@pytest.mark.distributed
def test_every_batch_of_every_rank_is_the_ledgers_across_a_resume_and_skips(tmp_path):
    make_dataset(tmp_path / "store", sizes=(9, 11, 10), name="web")
    make_dataset(tmp_path / "store", sizes=(7, 8), name="code")
    mix_file = tmp_path / "mix.yaml"
    mix_file.write_text("sources: {web: store/web, code: store/code}\nweights: {web: 2, code: 1}\n")
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [
            str(TORCHRUN),
            "--standalone",
            "--nproc_per_node",
            "3",
            str(SCRIPT),
            str(mix_file),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = json.loads(out.read_text())
    assert [r["rank"] for r in ranks] == [0, 1, 2]

    # one global batch is 6 of the 45 samples an epoch: 7 steps an epoch, 14 in two
    end = ranks[0]["end"]
    assert end == 14 and all(r["end"] == end for r in ranks)
    skipped = {1, 2, 8, 9}
    for r in ranks:
        steps = [b["step"] for b in r["batches"]]
        # every rank the same steps, none skipped
        assert steps == [s for s in range(end) if s not in skipped]
        for batch in r["batches"]:
            # steps after the resume: the resumed loader's ledger
            if str(batch["step"]) in r["ledger"]:
                assert [tuple(p) for p in r["ledger"][str(batch["step"])]] == [
                    tuple(k) for k in batch["keys"]
                ]
    # and every step is the batch a run without skips delivers, by the ledger of a loader in this
    # process
    plain = datapipe.Loader(
        str(mix_file), batch_size=2, num_workers=0, seed=5, rank=0, world_size=3
    )
    for r in ranks:
        for batch in r["batches"]:
            expected = plain.batch_keys(batch["step"], r["rank"])
            assert [tuple(k) for k in batch["keys"]] == [tuple(p) for p in expected]
    assert {s for r in ranks for b in r["batches"] for s, _ in b["keys"]} == {"web", "code"}
    assert ranks[0]["state"]["skips"] == [[1, 3], [8, 10]]
