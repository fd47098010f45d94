"""Each cleaning stage on one partition: rows kept, dropped (counted) or rejected (with a
reason)."""

import numpy as np
import pandas as pd
import pytest

from datapipe.builder.config import StageConfig
from datapipe.builder.stages import dedupe_hashes, run_stage
from datapipe.errors import BuildError, ConfigError


def stage(**kw) -> StageConfig:
    return StageConfig.model_validate(kw)


def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": ["a", "b", "c", "d", "e"],
            "label": pd.array([1, None, 3, 12, -1], dtype="Int64"),
            "note": ["x", None, "z", None, "w"],
        }
    )


def test_dropna_counts_what_it_drops():
    out = run_stage(stage(dropna={"columns": ["label"]}), "s", frame(), ".")
    assert list(out.frame["id"]) == ["a", "c", "d", "e"] and out.dropped == 1 and not out.rejected
    out = run_stage(stage(dropna={}), "s", frame(), ".")
    assert list(out.frame["id"]) == ["a", "c", "e"] and out.dropped == 2


def test_fillna_and_filter_treats_missing_as_false():
    filled = run_stage(stage(fillna={"values": {"note": ""}}), "s", frame(), ".").frame
    assert list(filled["note"]) == ["x", "", "z", "", "w"]
    out = run_stage(stage(filter="label >= 0 and label <= 9"), "s", frame(), ".")
    assert list(out.frame["id"]) == ["a", "c"] and out.dropped == 3


def test_filter_on_an_unknown_column_names_the_stage_and_the_columns():
    with pytest.raises(
        ConfigError, match=r"stages\[2\]\.filter: cannot evaluate .*columns: id, label, note"
    ):
        run_stage(stage(filter="lable > 1"), "stages[2].filter", frame(), ".")


def test_cast_rejects_what_does_not_fit_with_the_reason():
    df = pd.DataFrame({"v": ["1", "2.0", "2.5", "300", None, "x"]})
    out = run_stage(stage(cast={"v": "uint8"}), "stages[0].cast", df, ".")
    assert list(out.frame["v"].astype(object).where(out.frame["v"].notna(), None)) == [1, 2, None]
    reasons = {r.row: r.reason for r in out.rejected}
    assert set(reasons) == {2, 3, 5}
    assert "not a whole number" in reasons[2] and "outside the range of uint8" in reasons[3]
    assert all(r.stage == "stages[0].cast" and '"v"' in r.data for r in out.rejected)


def test_validate_rules_each_give_their_reason():
    df = pd.DataFrame(
        {
            "id": ["d0001", "bad", None, "d0004", "d0005"],
            "label": [1, 2, 3, 10, 4],
            "tag": ["a", "b", "a", "a", "zz"],
        }
    )
    rules = {
        "id": {"type": "string", "nullable": False, "pattern": "d[0-9]{4}"},
        "label": {"type": "int64", "min": 0, "max": 9},
        "tag": {"values": ["a", "b"], "max_length": 1},
    }
    out = run_stage(stage(validate=rules), "v", df, ".")
    assert list(out.frame["id"]) == ["d0001"]
    reasons = {r.row: r.reason for r in out.rejected}
    assert "does not match pattern" in reasons[1]
    assert "missing value" in reasons[2]
    assert "above max 9" in reasons[3] and "np." not in reasons[3]
    assert "not one of" in reasons[4]


def test_map_may_drop_rows_and_add_columns_but_not_add_rows(tmp_path):
    (tmp_path / "stagecode_a.py").write_text(
        "def keep_odd(df):\n    df = df[df.index % 2 == 0].copy()\n    df['n'] = 1\n    return df\n"
        "def grow(df):\n    import pandas as pd\n    return pd.concat([df, df])\n"
        "def boom(df):\n    raise KeyError('pixels')\n"
    )
    out = run_stage(stage(map="stagecode_a:keep_odd"), "m", frame(), str(tmp_path))
    assert (
        list(out.frame["id"]) == ["a", "c", "e"]
        and out.dropped == 2
        and list(out.frame["n"]) == [1, 1, 1]
    )
    with pytest.raises(BuildError, match="subset of its input rows"):
        run_stage(stage(map="stagecode_a:grow"), "m", frame(), str(tmp_path))
    with pytest.raises(BuildError, match=r"m: stagecode_a:boom raised KeyError"):
        run_stage(stage(map="stagecode_a:boom"), "m", frame(), str(tmp_path))
    with pytest.raises(ConfigError, match="has no function 'missing'"):
        run_stage(stage(map="stagecode_a:missing"), "m", frame(), str(tmp_path))
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module_x'"):
        run_stage(stage(map="no_such_module_x:f"), "m", frame(), str(tmp_path))


def test_dedupe_hashes_are_equal_exactly_for_equal_values():
    df = pd.DataFrame({"a": ["x", "y", "x", "x"], "b": [1, 1, 1, 2]})
    h = dedupe_hashes(df, ["a", "b"], "d")
    assert (
        h.shape == (4, 2)
        and (h[0] == h[2]).all()
        and not (h[0] == h[1]).all()
        and not (h[0] == h[3]).all()
    )
    out = run_stage(stage(dedupe={}), "d", df, ".", keep=np.array([True, True, False, True]))
    assert out.dropped == 1 and list(out.frame.index) == [0, 1, 3]
    with pytest.raises(ConfigError, match="no column 'c'"):
        dedupe_hashes(df, ["c"], "d")
