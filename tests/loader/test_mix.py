"""Mixing: the interleave's prefix proportions, each source read pass by pass, and a reweighted
resume."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sample_data import make_dataset

import datapipe
from datapipe.errors import ConfigError
from datapipe.loader.interleave import MAX_PERIOD, Interleave
from datapipe.loader.mix import mix
from datapipe.loader.mix_order import MixOrder, Segment

weight_lists = st.lists(st.integers(0, 12), min_size=1, max_size=6).filter(lambda w: sum(w) > 0)


@given(weight_lists, st.integers(0, 500))
def test_every_prefix_holds_each_weight_to_within_one_sample(weights, extra):
    interleave = Interleave([float(w) for w in weights])
    n = 2 * interleave.period + extra
    source, index = interleave.locate(np.arange(n))
    share = np.array(weights) / sum(weights)
    counts = np.zeros(len(weights), dtype=np.int64)
    for i, s in enumerate(source.tolist()):
        assert index[i] == counts[s]  # each source's items come in order, none skipped
        counts[s] += 1
        assert np.abs(counts - share * (i + 1)).max() < 1
    assert (interleave.counts(n) == counts).all()


@settings(max_examples=25)
@given(st.lists(st.floats(0.001, 1000), min_size=2, max_size=5))
def test_weights_that_are_no_small_fraction_still_stay_within_one_sample(weights):
    interleave = Interleave(weights)
    source, _ = interleave.locate(np.arange(3000))
    counts = np.cumsum(np.eye(len(weights), dtype=np.int64)[source], axis=0)
    share = np.array(weights) / sum(weights)
    n = np.arange(1, 3001)
    # the weights are rounded to multiples of 1 / MAX_PERIOD
    bound = 1 + n * len(weights) / MAX_PERIOD
    assert (np.abs(counts - np.outer(n, share)).max(axis=1) < bound).all()


def _mix_order(sizes, weights, seed, epoch, segment=None, epoch_samples=None, shuffle=True):
    arrays = tuple(np.array(s) for s in sizes)
    total = epoch_samples or sum(sum(s) for s in sizes)
    return MixOrder(
        tuple(f"s{i}" for i in range(len(sizes))),
        arrays,
        Interleave(weights),
        segment or Segment(0, (0,) * len(sizes)),
        total,
        seed,
        epoch,
        shuffle,
        2,
    )


source_sizes = st.lists(
    st.lists(st.integers(1, 12), min_size=1, max_size=4), min_size=1, max_size=4
)


@settings(max_examples=60)
@given(source_sizes, st.data(), st.integers(0, 2**20), st.booleans())
def test_each_source_is_read_pass_by_pass_with_no_sample_twice_in_a_pass(
    sizes, data, seed, shuffle
):
    weights = data.draw(st.lists(st.integers(1, 5), min_size=len(sizes), max_size=len(sizes)))
    order0 = _mix_order(sizes, weights, seed, 0, shuffle=shuffle)
    epochs = [_mix_order(sizes, weights, seed, e, shuffle=shuffle) for e in range(3)]
    located = [o.locate(np.arange(o.total)) for o in epochs]
    shard_ids = np.concatenate([s for s, _ in located])
    local = np.concatenate([r for _, r in located])
    # positions past the epoch: the next epochs
    source, item = order0.items(np.arange(3 * order0.total))
    for s, shards in enumerate(sizes):
        n = sum(shards)
        mine = source == s
        assert (item[mine] == np.arange(mine.sum())).all()
        samples = list(zip(shard_ids[mine].tolist(), local[mine].tolist(), strict=True))
        for p in range(0, len(samples), n):
            one_pass = samples[p : p + n]
            assert len(set(one_pass)) == len(one_pass)  # no repeat within a pass
            if len(one_pass) == n:  # a whole pass is every sample of the source once
                first = int(order0.shard_offsets[s])
                expected = {(first + i, j) for i, size in enumerate(shards) for j in range(size)}
                assert set(one_pass) == expected


@settings(max_examples=60)
@given(source_sizes, st.data(), st.integers(0, 2**20))
def test_a_weight_change_continues_every_source_from_its_cursor(sizes, data, seed):
    k = len(sizes)
    before = data.draw(st.lists(st.integers(1, 5), min_size=k, max_size=k))
    after = data.draw(st.lists(st.integers(1, 5), min_size=k, max_size=k))
    total = sum(sum(s) for s in sizes)
    at = data.draw(st.integers(0, 2 * total))
    first = _mix_order(sizes, before, seed, 0)
    source_a, item_a = first.items(np.arange(at))
    cursors = tuple(int((source_a == s).sum()) for s in range(k))
    later = _mix_order(sizes, after, seed, 0, Segment(at, cursors))
    source_b, item_b = later.items(np.arange(at, at + 3 * total))
    for s in range(k):
        items = np.concatenate([item_a[source_a == s], item_b[source_b == s]])
        assert (items == np.arange(len(items))).all()  # nothing of a pass repeated or skipped
    share = np.array(after) / sum(after)
    counts = np.cumsum(np.eye(k, dtype=np.int64)[source_b], axis=0)
    assert np.abs(counts - np.outer(np.arange(1, len(source_b) + 1), share)).max() < 1


@pytest.fixture
def sources(tmp_path):
    web = make_dataset(tmp_path / "store", sizes=(30, 20, 25), name="web")
    code = make_dataset(tmp_path / "store", sizes=(10, 7), name="code")
    return web, code


def _keys(batches):
    return [(list(b["__source__"]), list(b["__key__"])) for b in batches]


def test_batches_carry_the_weights_and_their_source_names(sources):
    web, code = sources
    mixed = mix({"web": web, "code": code}, weights={"web": 0.7, "code": 0.3})
    assert len(mixed) == 92 and mixed.fields == {"bin": "bytes", "cls": "int"}
    batches = list(datapipe.Loader(mixed, batch_size=10, num_workers=0))
    assert len(batches) == 9
    for batch in batches:
        assert Counter(batch["__source__"]) == {"web": 7, "code": 3}
        assert len(batch["cls"]) == 10


def test_the_order_is_the_same_with_workers_and_resumes_exactly(sources):
    web, code = sources
    mixed = mix({"web": web, "code": code}, weights={"web": 1, "code": 1}, epoch_samples=60)
    alone = _keys(datapipe.Loader(mixed, batch_size=6, num_workers=0, seed=3))
    assert _keys(datapipe.Loader(mixed, batch_size=6, num_workers=2, seed=3)) == alone
    loader = datapipe.Loader(mixed, batch_size=6, num_workers=0, seed=3)
    it = iter(loader)
    head = [next(it) for _ in range(4)]
    state = loader.state_dict()
    resumed = datapipe.Loader(
        mix({"web": web, "code": code}, {"web": 1, "code": 1}, 60),
        batch_size=6,
        num_workers=0,
        seed=3,
    )
    resumed.load_state_dict(state)
    assert _keys(head) + _keys(resumed) == alone


def test_a_resume_under_new_weights_repeats_and_skips_nothing_of_the_current_passes(sources):
    web, code = sources
    loader = datapipe.Loader(
        mix({"web": web, "code": code}, {"web": 0.7, "code": 0.3}), batch_size=10, num_workers=0
    )
    it = iter(loader)
    head = [next(it) for _ in range(3)]
    state = loader.state_dict()
    assert state["mix"]["cursors"] == {"web": [0, 21], "code": [0, 9]}
    resumed = datapipe.Loader(
        mix({"web": web, "code": code}, {"web": 0.2, "code": 0.8}), batch_size=10, num_workers=0
    )
    resumed.load_state_dict(state)
    tail = list(resumed)
    assert all(Counter(b["__source__"]) == {"web": 2, "code": 8} for b in tail)
    web_keys = [
        k
        for b in head + tail
        for s, k in zip(b["__source__"], b["__key__"], strict=True)
        if s == "web"
    ]
    assert len(set(web_keys)) == len(web_keys)  # web's first pass goes on where it stopped
    code_keys = [
        k
        for b in head + tail
        for s, k in zip(b["__source__"], b["__key__"], strict=True)
        if s == "code"
    ]
    passes = [code_keys[i : i + 17] for i in range(0, len(code_keys), 17)]
    assert all(len(set(p)) == len(p) for p in passes) and sorted(passes[0]) == sorted(
        set(code_keys)
    )


def test_a_state_of_other_sources_or_versions_is_refused_naming_the_difference(sources, tmp_path):
    web, code = sources
    loader = datapipe.Loader(
        mix({"web": web, "code": code}, {"web": 1, "code": 1}), batch_size=5, num_workers=0
    )
    state = loader.state_dict()
    other = datapipe.Loader(
        mix({"web": web, "text": code}, {"web": 1, "text": 1}), batch_size=5, num_workers=0
    )
    with pytest.raises(ConfigError, match="adds text; it lacks code"):
        other.load_state_dict(state)
    rebuilt = make_dataset(tmp_path / "other", sizes=(9, 9), name="code")
    newer = datapipe.Loader(
        mix({"web": web, "code": rebuilt}, {"web": 1, "code": 1}), batch_size=5, num_workers=0
    )
    with pytest.raises(ConfigError, match="mix source 'code': the state is for version"):
        newer.load_state_dict(state)
    single = datapipe.Loader(web, batch_size=5, num_workers=0)
    with pytest.raises(ConfigError, match="the state is for version"):
        single.load_state_dict(state)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"web": -1, "code": 1}, "mix source 'web': weight -1"),
        ({"web": float("nan"), "code": 1}, "mix source 'web': weight nan"),
        ({"web": 0, "code": 0}, "every weight of the mix is 0"),
        ({"web": 1}, "mix source 'code' has no weight"),
        ({"web": 1, "code": 1, "news": 1}, "'news', which is not a source"),
    ],
)
def test_bad_weights_are_config_errors_naming_the_source(sources, weights, message):
    web, code = sources
    with pytest.raises(ConfigError, match=message):
        mix({"web": web, "code": code}, weights)


def test_a_field_one_source_lacks_or_of_two_kinds_is_named(sources, tmp_path):
    web, code = sources
    mixed = mix({"web": web, "code": code}, {"web": 1, "code": 1})
    other = datapipe.open_dataset(code)
    other.manifest = type(other.manifest)(**{**other.manifest.__dict__, "fields": {"bin": "bytes"}})
    with pytest.raises(ConfigError, match="field 'cls' is not in mix source 'code'"):
        datapipe.Loader(
            mix({"web": web, "code": other}, {"web": 1, "code": 1}), fields=["cls"], num_workers=0
        )
    assert mix({"web": web, "code": other}, {"web": 1, "code": 1}).fields == {"bin": "bytes"}
    clash = datapipe.open_dataset(code)
    clash.manifest = type(clash.manifest)(
        **{**clash.manifest.__dict__, "fields": {"bin": "bytes", "cls": "str"}}
    )
    with pytest.raises(
        ConfigError, match="field 'cls' is int in mix source 'web' but str in 'code'"
    ):
        mix({"web": web, "code": clash}, {"web": 1, "code": 1})
    assert datapipe.Loader(mixed, fields=["cls"], num_workers=0, batch_size=4)


def test_a_mix_file_names_sources_relative_to_itself(sources, tmp_path):
    web, code = sources
    path = tmp_path / "mixes" / "pretrain.yaml"
    path.parent.mkdir()
    path.write_text(
        "sources:\n  web: ../store/web\n  code: {dataset: ../store/code@latest}\n"
        "weights: {web: 3, code: 1}\nepoch_samples: 40\n"
    )
    mixed = mix(path)
    assert mixed.names == ("web", "code") and mixed.weights == (0.75, 0.25) and len(mixed) == 40
    batches = list(datapipe.Loader(str(path), batch_size=8, num_workers=0))
    assert len(batches) == 5 and all(
        Counter(b["__source__"]) == {"web": 6, "code": 2} for b in batches
    )
    path.write_text("sources:\n  web: ../store/web\nweight: {web: 1}\n")
    with pytest.raises(ConfigError, match=r"pretrain.yaml: unknown key 'weight'"):
        mix(path)


def test_splits_are_mix_sources_and_their_state_names_the_split(digits_built):
    url = digits_built.url
    mixed = mix(
        {
            "train": {"dataset": url, "split": "train"},
            "val": datapipe.open_dataset(url, split="val"),
        },
        {"train": 1, "val": 1},
        epoch_samples=200,
    )
    val_keys = set(datapipe.open_dataset(url, split="val").keys_of(*_every_sample(url, "val")))
    batches = list(datapipe.Loader(mixed, batch_size=20, num_workers=0, fields=["cls"]))
    got = [(s, k) for b in batches for s, k in zip(b["__source__"], b["__key__"], strict=True)]
    assert {k for s, k in got if s == "val"} <= val_keys and not {
        k for s, k in got if s == "train"
    } & val_keys
    state = datapipe.Loader(mixed, batch_size=20, num_workers=0).state_dict()
    assert state["mix"]["sources"]["val"][1] == "val"
    with pytest.raises(ConfigError, match="split=.* applies to a dataset URL"):
        datapipe.Loader(mixed, split="val", num_workers=0)


def _every_sample(url, split):
    ds = datapipe.open_dataset(url, split=split)
    shard_ids = np.repeat(np.arange(len(ds.shard_sizes)), ds.shard_sizes)
    local = np.concatenate([np.arange(n) for n in ds.shard_sizes])
    return shard_ids, local


def test_a_users_own_dataloader_reads_a_mix_through_shard_dataset(sources):
    from torch.utils.data import DataLoader

    from datapipe.loader.torch import ShardDataset

    web, code = sources
    mixed = mix({"web": web, "code": code}, {"web": 1, "code": 1}, epoch_samples=40)
    expected = _keys(datapipe.Loader(mixed, batch_size=8, num_workers=0, seed=2))
    batches = list(
        DataLoader(ShardDataset(mixed, batch_size=8, seed=2), batch_size=None, num_workers=0)
    )
    assert _keys(batches) == expected
