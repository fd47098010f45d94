"""A build's rejects' data on its way to the quarantine: left in files by the tasks, read back by
row from a parent's quarantine, written as it comes, any text kept."""

import io
import json

import fsspec
import numpy as np
import pyarrow.parquet as pq

from datapipe.builder import quarantine
from datapipe.builder.quarantine import Reject, write_quarantine
from datapipe.builder.reject_data import DUPLICATES, MEASURED, InFile, RejectData, RejectsAt


def records(n: int, text=lambda i: f"row {i}"):
    """``n`` placed rejects, row i's data a JSON object of ``text(i)``."""
    for i in range(n):
        data = json.dumps({"text": text(i)}, ensure_ascii=False)
        yield Reject("stages[0].validate", f"why {i}", i, data), "raw/a.csv", i + 1, None


def test_a_text_utf8_cannot_hold_is_kept_as_its_escape(tmp_path):
    out = io.BytesIO()
    odd = ["\ud800 a lone surrogate", "\udcff from surrogateescape", "café ✓"]
    write_quarantine(out, records(3, lambda i: odd[i]))
    table = pq.read_table(io.BytesIO(out.getvalue()))
    # JSON's escape of the character: the same text once the data is read as JSON
    assert [json.loads(d)["text"] for d in table["data"].to_pylist()] == odd


def test_rows_are_read_back_from_any_row_group_in_any_order(tmp_path, monkeypatch):
    monkeypatch.setattr(quarantine, "ROWS_AT_ONCE", 7)  # row groups of 7 rows
    path = str(tmp_path / "rejected.parquet")
    with open(path, "wb") as f:
        write_quarantine(f, records(50))
    assert pq.ParquetFile(path).num_row_groups == 8
    rows = np.array([49, 0, 13, 14, 6, 7, 13])
    data = InFile(path, rows).read(fsspec.filesystem("file"))
    assert [json.loads(d)["text"] for d in data] == [f"row {r}" for r in rows]


def test_a_partitions_files_fill_its_rejects_in_order(tmp_path):
    fs = fsspec.filesystem("file")
    path = str(tmp_path / "rejected.parquet")
    with open(path, "wb") as f:
        write_quarantine(f, records(10))
    at = RejectsAt(fs, str(tmp_path / "partial"))
    left = [Reject("sample", "r", 7, '{"text": "from a task"}'), Reject("sample", "s", 9, "\ud800")]
    assert [r.data for r in at.kept(DUPLICATES, 3, left)] == [None, None]
    assert at.kept(MEASURED, 3, []) == [] and not fs.exists(at.path(MEASURED, 3))
    data = RejectData()
    data.add(3, InFile(path, np.array([4, 2])))
    data.add(3, InFile(at.path(DUPLICATES, 3)))
    rejects = [Reject("sample", "r", i, None) for i in range(4)]
    filled = data.filler(fs)(3, rejects)
    assert [r.data for r in filled] == [
        '{"text": "row 4"}',
        '{"text": "row 2"}',
        '{"text": "from a task"}',
        "\\ud800",  # the escape of what UTF-8 cannot hold
    ]
    assert [r.row for r in filled] == [0, 1, 2, 3]


def test_a_reader_takes_the_data_of_the_rows_it_shows_only(tmp_path, monkeypatch):
    from datapipe.versioning.rejected import read_rows, with_data
    from datapipe.versioning.store import Store

    monkeypatch.setattr(quarantine, "ROWS_AT_ONCE", 4)
    with open(tmp_path / "rejected.parquet", "wb") as f:
        write_quarantine(f, records(30))
    store = Store(str(tmp_path))
    path = store.path("rejected.parquet")
    rows = read_rows(store, path, data=False)
    assert len(rows) == 30 and all(r["data"] is None for r in rows)
    shown = with_data(store, path, [rows[29], rows[3], rows[12]])
    assert shown == [
        {**read_rows(store, path)[i], "data": json.dumps({"text": f"row {i}"})} for i in (29, 3, 12)
    ]


def test_partitions_read_in_order_read_each_row_group_once(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    monkeypatch.setattr(quarantine, "ROWS_AT_ONCE", 10)
    path = str(tmp_path / "rejected.parquet")
    with open(path, "wb") as f:
        write_quarantine(f, records(40))
    groups = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(
        pq.ParquetFile,
        "read_row_group",
        lambda self, g, **kw: groups.append(g) or real(self, g, **kw),
    )
    data = RejectData()
    for part, rows in enumerate([[0, 3], [5, 12], [15, 18, 19], [20], [38, 39]]):
        data.add(part, InFile(path, np.array(rows)))
    fill = data.filler(fsspec.filesystem("file"))
    for part, n in enumerate([2, 2, 3, 1, 2]):
        fill(part, [Reject("s", "r", i, None) for i in range(n)])
    assert groups == [0, 1, 2, 3]
