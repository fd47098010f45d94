"""The step ledger, skips and the audit on packed rows: pieces without a token read."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.cli import datapipe_in_process
from helpers.versions import commit_tokens
from test_packed_rows import read_documents, token_shards

import datapipe
from datapipe.loader.audit import audit
from datapipe.loader.dataset import open_dataset
from datapipe.loader.tokens.packed_set import PackedSet
from datapipe.versioning.store import Store


@pytest.fixture
def toks(tmp_path) -> str:
    commit_tokens(Store(str(tmp_path / "store")), token_shards(shards=7))
    return str(tmp_path / "store" / "toks")


def test_batch_keys_name_the_pieces_each_step_delivers_to_each_rank(toks):
    pack = datapipe.pack(16, "best-fit")
    ranks = [
        datapipe.Loader(toks, batch_size=2, pack=pack, num_workers=0, rank=r, world_size=2)
        for r in range(2)
    ]
    delivered = [list(r) for r in ranks]
    for step in range(len(delivered[0])):
        assert (
            ranks[0].batch_keys(step)
            == delivered[0][step]["__key__"] + delivered[1][step]["__key__"]
        )
        assert ranks[1].batch_keys(step, rank=1) == delivered[1][step]["__key__"]


def test_skipped_steps_skip_their_rows(toks):
    pack = datapipe.pack(16)
    every = [b["__key__"] for b in datapipe.Loader(toks, batch_size=2, pack=pack, num_workers=0)]
    skipping = datapipe.Loader(toks, batch_size=2, pack=pack, num_workers=0, skip_steps=[(1, 3)])
    assert [b["__key__"] for b in skipping] == every[:1] + every[3:]
    assert skipping.batch_keys(2) == []


@pytest.mark.parametrize(
    ("mode", "long"), [("concat", "split"), ("best-fit", "split"), ("pad", "truncate")]
)
def test_the_audit_counts_tokens_padding_and_documents(toks, mode, long):
    docs = read_documents(toks)
    with open_dataset(toks) as ds:
        rows = PackedSet(ds, datapipe.pack(16, mode, long=long), seed=0)
        report = audit(rows, batch_size=1, world_size=1, resumes=["3:1"])
        assert report.ok, report.violations
        tokens = report.epochs[0].tokens
        lengths = np.array([len(d) for d in docs.values()])
        if mode == "concat":
            assert tokens["padding"] == 0 and tokens["tokens"] == 16 * tokens["rows"]
            assert tokens["documents"]["cut"] + tokens["documents"]["never"] >= 1
        elif long == "split":
            assert tokens["tokens"] == lengths.sum()
            assert tokens["documents"]["split"] == int((lengths > 16).sum())
            assert tokens["documents"]["whole"] == int((lengths <= 16).sum())
        else:
            assert tokens["tokens"] == np.minimum(lengths, 16).sum()
            assert tokens["documents"]["cut"] == int((lengths > 16).sum())
        assert tokens["padding"] == pytest.approx(
            1 - tokens["tokens"] / (16 * tokens["rows"]), abs=1e-6
        )


def test_the_cli_audits_and_lists_packed_rows(toks):
    done = datapipe_in_process(
        "audit", toks, "-b", "2", "-w", "2", "--pack", "length=16,mode=best-fit", "--resume", "2:1"
    )
    assert done.returncode == 0, done.stderr
    assert "ok: every property holds" in done.stdout and "padding" in done.stdout
    listed = datapipe_in_process(
        "batches", toks, "-b", "2", "--pack", "length=16", "--step", "0", "--json"
    )
    rows = json.loads(listed.stdout)
    loader = datapipe.Loader(toks, batch_size=2, pack=datapipe.pack(16), num_workers=0)
    assert [[tuple(p) for p in r["pieces"]] for r in rows] == loader.batch_keys(0)
    bad = datapipe_in_process("audit", toks, "-b", "2", "--pack", "length=16,mode=fit")
    assert bad.returncode != 0 and "mode='fit' is not one of concat, best-fit, pad" in bad.stderr
