"""The step ledger and skips: global steps across epochs and resumes, what each delivers, and steps
left out."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sample_data import make_dataset

import datapipe
from datapipe.errors import ConfigError
from datapipe.loader.timeline import Skips, Timeline


@given(
    st.integers(1, 200),
    st.integers(1, 9),
    st.integers(1, 4),
    st.sampled_from([True, "pad"]),
    st.integers(0, 50),
    st.data(),
)
def test_steps_number_the_global_batches_across_epochs(
    total, batch, world, drop_last, anchor_step, data
):
    per_epoch = Timeline(total, batch, world, drop_last).steps_per_epoch
    if per_epoch == 0:
        return
    epoch = data.draw(st.integers(0, 3))
    position = data.draw(st.integers(0, total))
    timeline = Timeline(total, batch, world, drop_last, anchor_step, epoch, position)
    step = anchor_step
    for e in range(epoch, epoch + 3):
        assert timeline.first_step(e) == step
        for i in range(timeline.plan(e).num_batches()):
            assert timeline.locate(step) == (e, i)
            step += 1
    if anchor_step:
        with pytest.raises(ConfigError, match="before the resume"):
            timeline.locate(anchor_step - 1)


@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 10)), max_size=5),
    st.integers(0, 30),
    st.integers(0, 25),
)
def test_skips_leave_out_exactly_their_steps(pairs, first, n):
    skips = Skips.of([(a, a + length) for a, length in pairs])
    kept = skips.kept(first, n)
    expected = [i for i in range(n) if not any(a <= first + i < a + length for a, length in pairs)]
    assert (list(range(n)) if kept is None else kept.tolist()) == expected
    # merged, ordered
    assert all(b < c for (_, b), (c, _) in zip(skips.ranges, skips.ranges[1:], strict=False))


@pytest.mark.parametrize("pair", [(3, 3), (-1, 2), ("a", 4)])
def test_a_bad_skip_is_a_config_error(pair):
    with pytest.raises(ConfigError, match="skip_steps"):
        Skips.of([pair])


@pytest.fixture
def url(tmp_path):
    return make_dataset(tmp_path / "store", sizes=(13, 9, 17, 11))  # 50 samples


def _batches(loader, epochs):
    out = {}
    while loader.epoch < epochs:
        for batch in loader:
            out[loader.step - 1] = list(batch["__key__"])
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_the_ledger_is_what_the_loader_delivers_and_skips_change_nothing_else(url, workers):
    options = {"batch_size": 4, "seed": 2, "rank": 1, "world_size": 2, "num_workers": workers}
    plain = _batches(datapipe.Loader(url, **options), 2)
    assert sorted(plain) == list(range(12))  # 6 global batches of 8 an epoch
    ledger = datapipe.Loader(url, **options)
    for step, keys in plain.items():
        assert [k for _, k in ledger.batch_keys(step, 1)] == keys
        assert {s for s, _ in ledger.batch_keys(step)} == {"toy"} and len(
            ledger.batch_keys(step)
        ) == 8
    skipping = datapipe.Loader(url, skip_steps=[(2, 4)], **options)
    assert len(skipping) == 4
    first = []
    for batch in skipping:
        first.append(list(batch["__key__"]))
        if len(first) == 3:
            break
    state = skipping.state_dict()
    assert state["skips"] == [[2, 4]] and state["step"] == 5  # steps 0, 1, then 4 delivered
    resumed = datapipe.Loader(url, **options)
    resumed.load_state_dict(state)
    resumed.skip_steps(9, 10)
    skipped = {0: first[0], 1: first[1], 4: first[2], **_batches(resumed, 2)}
    assert sorted(skipped) == [0, 1, 4, 5, 6, 7, 8, 10, 11]
    assert all(skipped[s] == plain[s] for s in skipped)
    assert resumed.batch_keys(9) == [] and resumed.batch_keys(10, 1) == [
        ("toy", k) for k in plain[10]
    ]


def test_steps_before_an_elastic_resume_are_not_this_loaders_to_tell(url):
    loader = datapipe.Loader(url, batch_size=4, num_workers=0)
    it = iter(loader)
    next(it), next(it)
    resumed = datapipe.Loader(url, batch_size=4, num_workers=0, rank=0, world_size=3)
    resumed.load_state_dict(loader.state_dict())
    assert resumed.step == 2 and len(resumed.batch_keys(2)) == 12
    with pytest.raises(ConfigError, match="step 1 ran before the resume at step 2"):
        resumed.batch_keys(1)
    same = datapipe.Loader(url, batch_size=4, num_workers=0)
    same.load_state_dict(loader.state_dict())
    assert same.batch_keys(0) == loader.batch_keys(0)  # the same world: the whole timeline is known


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 3), st.integers(0, 14), st.integers(1, 4))
def test_an_elastic_resume_numbers_steps_on_from_the_saved_step(batch, world, stop, new_world):
    loader_sizes = np.array([13, 9, 17, 11])
    timeline = Timeline(int(loader_sizes.sum()), batch, world)
    if timeline.steps_per_epoch == 0:
        return
    epoch, index = timeline.locate(stop)
    position = timeline.plan(epoch).position_after(index)
    after = Timeline(int(loader_sizes.sum()), batch, new_world, True, stop, epoch, position)
    assert after.locate(stop) == (epoch, 0) or after.plan(epoch).num_batches() == 0
