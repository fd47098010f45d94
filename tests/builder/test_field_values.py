"""Values a user's columns hold, as samples keep them: dates and datetimes (cast and validate),
missing values and infinities in a `json: [columns]` field, and per-row numpy arrays from a map."""

import datetime
import io
import json

import numpy as np
import pandas as pd
import pytest

from datapipe.builder.dates import cast_date

EVENTS = """\
id,day,at
a,2024-01-31,2024-01-31T09:30:00Z
b,2024-02-29,2024-02-29 10:00:00+02:00
c,2024-03-01,2024-03-01T00:00:00
d,2024-13-01,2024-03-01T00:00:00
e,2024-03-01T10:00,2024-03-01T00:00:00
f,2024-03-02,yesterday
"""


def quarantine(project, result) -> pd.DataFrame:
    m = result.manifest
    return pd.read_parquet(project.store.path(m.name, "versions", m.version, m.rejected))


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_dates_and_datetimes_are_cast_to_one_timezone_rule(project, fmt):
    project.write("raw/events.csv", EVENTS)
    project.pipeline(
        f"""
        name: events
        source: {{path: raw/events.csv, format: csv}}
        stages:
          - cast: {{day: date, at: datetime}}
          - validate: {{day: {{type: date}}, at: {{type: datetime}}}}
        sample:
          key: id
          fields: {{day: day, at: at}}
        shards: {{format: {fmt}}}
        max_rejected: 0.9
        """
    )
    result = project.build()
    samples = {s["__key__"]: s for s in project.samples(result)}
    # an offset is converted to UTC; a value without one is UTC already
    assert {k: (s["day"], s["at"]) for k, s in samples.items()} == {
        "a": (b"2024-01-31", b"2024-01-31T09:30:00+00:00"),
        "b": (b"2024-02-29", b"2024-02-29T08:00:00+00:00"),
        "c": (b"2024-03-01", b"2024-03-01T00:00:00+00:00"),
    }
    rejected = quarantine(project, result)
    reasons = dict(zip(rejected["data"], rejected["reason"], strict=True))
    reasons = {json.loads(d)["id"]: r for d, r in reasons.items()}
    assert "'2024-13-01': month must be in 1..12" in reasons["d"]
    assert "has a time of day; cast it to datetime" in reasons["e"]
    assert "'yesterday' is not an ISO 8601 datetime" in reasons["f"]
    counts = {s.stage: (s.rows_out, s.rejected) for s in result.manifest.stages}
    assert counts["stages[0].cast"] == (3, 3) and counts["stages[1].validate"] == (3, 0)


def test_a_date_cast_takes_date_objects_and_refuses_numbers():
    assert cast_date(datetime.date(2024, 5, 1), "date") == datetime.date(2024, 5, 1)
    assert cast_date(pd.Timestamp("2024-05-01"), "date") == datetime.date(2024, 5, 1)
    stamp = cast_date(datetime.datetime(2024, 5, 1, 12), "datetime")
    assert stamp == pd.Timestamp("2024-05-01T12:00Z") and str(stamp.tz) == "UTC"
    with pytest.raises(ValueError, match="convert numbers .epoch seconds. in a map stage"):
        cast_date(1714560000, "datetime")
    with pytest.raises(ValueError, match="has a time of day or a timezone"):
        cast_date(pd.Timestamp("2024-05-01T12:00"), "date")


def test_json_fields_hold_missing_values_as_null_and_quarantine_infinities(project):
    project.write("raw/nums.csv", "id,a,b\nr1,1.5,x\nr2,,y\nr3,inf,z\n")
    project.write(
        "arrays.py",
        "import numpy as np\n\n\ndef add(frame):\n    frame = frame.copy()\n"
        "    frame['vec'] = [np.arange(3, dtype=np.float32) * i for i in range(len(frame))]\n"
        "    return frame\n",
    )
    project.pipeline(
        """
        name: nums
        source: {path: raw/nums.csv, format: csv}
        stages:
          - map: arrays:add
        sample:
          key: id
          fields: {json: [a, b], npy: vec}
        max_rejected: 0.9
        """
    )
    result = project.build()
    samples = {s["__key__"]: s for s in project.samples(result)}
    assert samples["r1"]["json"] == b'{"a":1.5,"b":"x"}'
    assert samples["r2"]["json"] == b'{"a":null,"b":"y"}'
    # a per-row numpy array from a map is an .npy field
    vec = np.load(io.BytesIO(samples["r2"]["npy"]))
    assert vec.dtype == np.float32 and vec.tolist() == [0.0, 1.0, 2.0]
    rejected = quarantine(project, result)
    assert rejected["stage"].tolist() == ["sample"]
    assert "column 'a' is inf, which JSON cannot hold" in rejected["reason"][0]
    assert json.loads(rejected["data"][0])["a"] == "inf"  # the row is kept whatever it holds
