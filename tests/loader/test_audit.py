"""The audit replays runs with resumes and catches a schedule that breaks exactly-once; its CLI
exits 0 or 1."""

import json

import numpy as np
import pytest
from helpers.cli import datapipe_in_process
from hypothesis import given, settings
from hypothesis import strategies as st
from sample_data import make_dataset

import datapipe
from datapipe.errors import ConfigError
from datapipe.loader.audit import Resume, audit


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("audit") / "store", sizes=(13, 9, 17, 11))


@pytest.fixture(scope="module")
def mix_file(tmp_path_factory, url):
    root = tmp_path_factory.mktemp("audit-mix")
    make_dataset(root / "store", sizes=(6, 5), name="code")
    path = root / "mix.yaml"
    path.write_text(
        f"sources: {{web: {url}, code: store/code}}\nweights: "
        f"{{web: 3, code: 1}}\nepoch_samples: 40\n"
    )
    return path


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 7),
    st.integers(1, 4),
    st.sampled_from([True, "pad"]),
    st.integers(0, 3),
    st.lists(st.tuples(st.integers(0, 30), st.integers(1, 4), st.integers(1, 7)), max_size=2),
)
def test_runs_with_any_resumes_hold_every_property(url, batch, world, drop_last, seed, resumes):
    ds = datapipe.open_dataset(url)
    if 50 < batch * world:
        return
    plan = [Resume(step, w, b) for step, w, b in sorted(resumes)]
    report = audit(ds, batch, world, seed, epochs=3, drop_last=drop_last, resumes=plan)
    assert report.ok, report.violations
    for epoch in report.epochs:
        assert epoch.repeated == 0
        if drop_last is True:
            assert epoch.padded == 0 and epoch.samples + epoch.never == 50
        else:
            assert epoch.never == 0 and epoch.samples - epoch.padded == 50


def test_a_mix_reports_each_sources_share(mix_file):
    report = audit(datapipe.mix(mix_file), 4, 2, epochs=2, resumes=["2:2", "6:1"])
    assert report.ok
    assert report.epochs[0].shares == {"web": 0.75, "code": 0.25}
    assert report.epochs[0].batches_per_rank == [(2, 2), (2, 3)]
    assert report.epochs[1].batches_per_rank == [(2, 1), (1, 8)]


class _RepeatsOne:
    """A test double of a schedule bug: the order of every epoch delivers position 7's sample at
    position 8 too."""

    def __init__(self, dataset):
        self._dataset = dataset

    def __getattr__(self, name):
        return getattr(self._dataset, name)

    def __len__(self):
        return len(self._dataset)

    def order(self, *args):
        order = self._dataset.order(*args)
        locate = order.locate

        def broken(positions):
            positions = np.where(np.asarray(positions) == 8, 7, positions)
            return locate(positions)

        order.locate = broken
        return order


def test_a_schedule_that_repeats_one_sample_fails_naming_it(url):
    ds = datapipe.open_dataset(url)
    report = audit(_RepeatsOne(ds), 4, 2, epochs=1)
    assert not report.ok
    violation = report.violations[0]
    shard, local = ds.order(0, 0, True, 4).locate(np.array([7]))
    # position 8: step 1, rank 0
    assert (violation.epoch, violation.step, violation.rank) == (0, 1, 0)
    assert violation.key == ds.keys_of(shard, local)[0] and "second time" in str(violation)


def test_the_cli_prints_the_audit_and_exits_by_its_verdict(url, mix_file):
    result = datapipe_in_process(
        "audit", url, "-b", "4", "-w", "2", "--epochs", "2", "--resume", "3:3"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "never delivered: drop_last: the last 2 of 50" in result.stdout
    assert "ok: every property holds" in result.stdout
    result = datapipe_in_process("audit", str(mix_file), "-b", "4", "-w", "2", "--json")
    report = json.loads(result.stdout)
    assert report["ok"] and report["epochs"][0]["shares"] == {"web": 0.75, "code": 0.25}
    result = datapipe_in_process("audit", url, "-b", "4", "--resume", "three:2")
    assert result.returncode == 2 and "--resume 'three:2': give STEP:WORLD_SIZE" in (
        result.stdout + result.stderr
    )


def test_the_audit_exits_1_on_a_violation(url, monkeypatch):
    import datapipe.loader.opening as opening

    opened = opening.open_data
    monkeypatch.setattr(opening, "open_data", lambda *a, **k: _RepeatsOne(opened(*a, **k)))
    result = datapipe_in_process("audit", url, "-b", "4", "-w", "2")
    assert result.returncode == 1 and "violation: epoch 0, step 1, rank 0: toy key" in (
        result.stdout + result.stderr
    )


def test_batches_prints_what_the_ledger_says(url, mix_file):
    result = datapipe_in_process(
        "batches", url, "-b", "3", "-w", "2", "--seed", "4", "--steps", "2:4", "--json"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    entries = json.loads(result.stdout)
    loader = datapipe.Loader(url, batch_size=3, seed=4, rank=0, world_size=2, num_workers=0)
    assert [(e["source"], e["key"]) for e in entries] == loader.batch_keys(2) + loader.batch_keys(3)
    assert {e["shard"] for e in entries} <= {s.path for s in loader.dataset.shards}
    text = datapipe_in_process(
        "batches", str(mix_file), "-b", "2", "--step", "0", "--rank", "0"
    ).stdout
    assert text.startswith("step 0 rank 0\n") and ".tar@" in text
    bad = datapipe_in_process("batches", url, "-b", "3", "--steps", "4:2")
    assert bad.returncode == 2 and "--steps '4:2'" in (bad.stdout + bad.stderr)


def test_bad_audits_are_config_errors(url):
    with pytest.raises(ConfigError, match="epochs must be at least 1"):
        audit(datapipe.open_dataset(url), 4, 1, epochs=0)
    with pytest.raises(ConfigError, match="give STEP:WORLD_SIZE"):
        audit(datapipe.open_dataset(url), 4, 1, resumes=["5:0"])
