"""Splits: the split function swept by hypothesis (stable under other rows' insertions, deletions
and edits; the fractions within sampling error), the splits section's errors, and real builds with
splits."""

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from datapipe.builder.config import parse_pipeline
from datapipe.builder.splits import assign_splits, split_names
from datapipe.errors import ConfigError

FRACTIONS = {"train": 0.9, "val": 0.05, "test": 0.05}
values = st.one_of(st.text(max_size=20), st.integers(-(10**12), 10**12), st.none())
fractions = st.lists(st.floats(0.01, 1), min_size=1, max_size=6).map(
    lambda ws: {f"s{i}": w / math.fsum(ws) for i, w in enumerate(ws)}
)


@given(
    st.lists(values, max_size=60),
    st.lists(values, max_size=30),
    st.data(),
    fractions,
    st.integers(0, 2**63 - 1),
)
def test_a_split_depends_on_the_value_alone_not_on_other_rows(rows, inserted, data, fracs, seed):
    before = assign_splits(rows, fracs, seed)
    assert before.dtype == np.int8 and len(before) == len(rows)
    assert ((0 <= before) & (before < len(fracs))).all()
    # other rows inserted anywhere, some deleted, some edited, the rest shuffled
    kept = [r for r in rows if data.draw(st.booleans())]
    edited = [data.draw(values) if data.draw(st.booleans()) else r for r in kept]
    later = data.draw(st.permutations(edited + inserted))
    after = dict(zip(map(repr, later), assign_splits(later, fracs, seed).tolist(), strict=True))
    for row, split in zip(rows, before.tolist(), strict=True):
        if repr(row) in after:
            assert after[repr(row)] == split
    # one value alone gets the split it gets among the others
    assert [assign_splits([r], fracs, seed)[0] for r in rows[:5]] == before[:5].tolist()


@given(fractions, st.integers(0, 2**32), st.integers(2000, 6000))
def test_the_fractions_hold_within_sampling_error(fracs, seed, n):
    counts = np.bincount(
        assign_splits([f"key{i:07d}" for i in range(n)], fracs, seed), minlength=len(fracs)
    )
    for name, count in zip(split_names(fracs), counts.tolist(), strict=True):
        p = fracs[name]
        assert abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1, (name, p, count, n)


def test_equal_values_share_a_split_whatever_their_type_and_nulls_go_together():
    got = assign_splits(
        [5, 5.0, "5", np.int64(5), None, float("nan"), np.nan], {"a": 0.5, "b": 0.5}, 3
    )
    assert len(set(got[:4].tolist())) == 1 and len(set(got[4:].tolist())) == 1
    # the splits take their intervals in name order, not in the order the YAML gives them
    keys = [f"k{i}" for i in range(500)]
    assert (
        assign_splits(keys, {"val": 0.2, "train": 0.8})
        == assign_splits(keys, {"train": 0.8, "val": 0.2})
    ).all()
    assert split_names({"val": 0.2, "train": 0.8}) == ["train", "val"]
    # the seed salts
    assert (assign_splits(keys, FRACTIONS, 0) != assign_splits(keys, FRACTIONS, 1)).any()


BASE = """\
name: toy
source: {path: raw/*.csv, format: csv}
sample: {key: id, fields: {cls: label}}
"""


@pytest.mark.parametrize(
    ("splits", "message"),
    [
        (
            "{fractions: {train: 0.9, val: 0.2}}",
            "splits.fractions: the fractions sum to 1.1, not 1",
        ),
        (
            "{fractions: {train: 1.0, val: 0}}",
            "splits.fractions: val: a fraction must be a number above 0, got 0",
        ),
        ("{fractions: {train: 1.5, val: -0.5}}", "a fraction must be a number above 0, got -0.5"),
        ("{fractions: {}}", "splits.fractions: no splits"),
        ("{fractions: {a/b: 1}}", "bad split name 'a/b'"),
        ("{fractions: {train: 1}, by: ''}", "splits.by:"),
        ("{fractions: {train: 1}, seed: -1}", "splits.seed:"),
        (
            "{fractions: {train: 1}, colour: red}",
            "unknown key 'colour'; use one of: fractions, by, seed",
        ),
        ("{by: id}", "splits.fractions: required key is missing"),
    ],
)
def test_a_bad_splits_section_is_a_config_error_naming_the_field(splits, message):
    with pytest.raises(ConfigError, match="^p.yaml:4: ") as e:
        parse_pipeline(BASE + f"splits: {splits}\n", "p.yaml")
    assert message in str(e.value)


def test_fractions_that_sum_to_one_in_decimal_pass():
    cfg = parse_pipeline(
        BASE + "splits: {fractions: {train: 0.7, val: 0.2, test: 0.1}}\n", "p.yaml"
    ).splits
    assert (
        cfg.by is None
        and cfg.seed == 0
        and cfg.fractions == {"train": 0.7, "val": 0.2, "test": 0.1}
    )
    assert parse_pipeline(BASE, "p.yaml").canonical().keys() == {
        "name",
        "source",
        "stages",
        "sample",
        "shards",
        # no splits key: same ids
        "max_rejected",
    }


def write_rows(project, ids, name="raw/rows.csv"):
    project.write(name, "id,group,label\n" + "".join(f"r{i:05d},g{i % 37},{i % 10}\n" for i in ids))


SPLIT_PIPELINE = """\
name: rows
source: {{path: raw/*.csv, format: csv, options: {{blocksize: {blocksize}}}}}
sample: {{key: id, fields: {{cls: label, txt: group}}}}
shards: {{max_samples: 40, shuffle_seed: {seed}}}
splits:
  fractions: {{train: 0.8, val: 0.1, test: 0.1}}
  {by}
"""


def split_pipeline(blocksize="1MB", seed="null", by=""):
    return SPLIT_PIPELINE.format(blocksize=blocksize, seed=seed, by=by)


def keys_by_split(project, result):
    out = {}
    for entry in result.manifest.shards:
        got = project.samples(replace(result.manifest, shards=(entry,)))
        out.setdefault(entry.split, []).extend(s["__key__"] for s in got)
    return out


def test_a_build_with_splits_writes_each_split_its_own_shards(project, in_process):
    write_rows(project, range(1000))
    project.pipeline(split_pipeline())
    result = project.build(client=in_process)
    m = result.manifest
    assert m.splits.names == ["test", "train", "val"] and m.splits.by is None and m.splits.seed == 0
    assert sum(m.splits.samples.values()) == m.samples == 1000  # every row accounted for
    assert result.summary()["splits"] == m.splits.samples
    by_split = keys_by_split(project, result)
    for split, keys in by_split.items():
        assert (
            len(keys)
            == m.splits.samples[split]
            == sum(s.samples for s in m.shards if s.split == split)
        )
        assert all(s.path.startswith(f"{split}-") for s in m.shards if s.split == split)
        names = split_names(m.splits.fractions)
        # the split function's
        assert {names[i] for i in assign_splits(keys, m.splits.fractions)} == {split}
    assert [s.path for s in m.shards if s.split == "val"][0] == "val-000000.tar"
    # a loader of one split sees exactly its samples
    from datapipe.loader.dataset import open_dataset

    val = open_dataset(f"{project.store.url}/rows", split="val")
    assert val.split == "val" and val.version == m.version and len(val) == m.splits.samples["val"]
    assert sorted(val[i]["__key__"] for i in range(len(val))) == sorted(by_split["val"])


def test_the_same_rows_give_the_same_version_whatever_the_partitions(project, in_process):
    write_rows(project, range(0, 600, 2), "raw/a.csv")
    write_rows(project, range(1, 600, 2), "raw/b.csv")
    versions = set()
    for blocksize in ("1MB", "2KB"):
        project.pipeline(split_pipeline(blocksize=blocksize, seed=7))
        versions.add(project.build(client=in_process).manifest.version)
    assert len(versions) == 1
    project.pipeline(split_pipeline(seed=7, by="seed: 1"))
    # the assignment is in the id
    assert project.build(client=in_process).manifest.version not in versions


def test_a_rebuild_with_added_and_removed_rows_keeps_every_sample_in_its_split(project, in_process):
    write_rows(project, range(400))
    project.pipeline(split_pipeline(by="by: group"))
    before = keys_by_split(project, project.build(client=in_process))
    # 300 rows added, 57 of the old ones removed
    write_rows(project, [i for i in range(700) if i % 7])
    after = {
        key: split
        for split, keys in keys_by_split(project, project.build(client=in_process)).items()
        for key in keys
    }
    moved = [
        (key, split)
        for split, keys in before.items()
        for key in keys
        if after.get(key, split) != split
    ]
    assert not moved and len(after) == 600
    groups = {}  # by: group: every row of a group is in one split
    for key, split in after.items():
        groups.setdefault(int(key[1:]) % 37, set()).add(split)
    assert all(len(s) == 1 for s in groups.values())


def test_a_by_column_missing_after_the_stages_names_it_and_the_file(project, in_process):
    write_rows(project, range(50))
    project.pipeline(split_pipeline(by="by: user"))
    with pytest.raises(
        ConfigError,
        match=r"pipeline.yaml:\d+: splits.by: no column 'user' after the stages "
        r"\(columns: id, group, label\)",
    ):
        project.build(client=in_process)


def test_a_pipeline_without_splits_keeps_a_pinned_version_id(project, in_process):
    """The id of this pipeline since manifest format 2 (shards cut by content); splits did not
    change it. A change of bytes or id shows here first, and needs a format version of its own."""
    write_rows(project, range(300))
    project.pipeline("""\
        name: rows
        source: {path: raw/*.csv, format: csv}
        sample: {key: id, fields: {cls: label, txt: group}}
        shards: {max_samples: 40, shuffle_seed: 7}
        """)
    m = project.build(client=in_process).manifest
    assert (
        m.splits is None
        and all(s.split is None for s in m.shards)
        and m.shards[0].path == "shard-000000.tar"
    )
    assert m.version == "74513b4ed4e46156c03e3f0286ab29f53cf4fd374b18811231c4f9df3225ba06"
