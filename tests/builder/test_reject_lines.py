"""Where a rejected record came from: its row and the line it starts on in its text file, the same
whatever the blocksize (quoted newlines make the two differ)."""

import json

import pyarrow.parquet as pq
import pytest

from datapipe.builder.config import SourceConfig
from datapipe.builder.source.opening import partitioned_source
from datapipe.builder.source.registry import read_part
from datapipe.versioning.manifest import REJECTED_NAME

BLOCKSIZES = [64, 100, 257, 1000, 1 << 20]


def row_lines(root, name: str, fmt: str, blocksize: int, **options) -> list[int | None]:
    """The 1-based line each record (good or rejected) of ``name`` starts on, in file order, as the
    readers report them: a partition's lines follow the newlines of the partitions before it."""
    plan = partitioned_source(
        SourceConfig(path=name, format=fmt, options={"blocksize": blocksize, **options}),
        str(root),
    )
    out: list[int | None] = []
    before = 0
    for part in plan.parts:
        raw = read_part(plan, part)
        assert raw.newlines is not None
        if raw.lines is None:
            out.extend([None] * raw.rows_in)
        else:
            assert len(raw.lines) == raw.rows_in
            out.extend(before + int(line) + 1 for line in raw.lines)
        before += raw.newlines
    return out


def test_csv_lines_count_quoted_newlines_at_every_blocksize(tmp_path):
    records, starts, line = ["id,text,n"], [], 2
    for i in range(120):
        text = f'"one {i}\ntwo\n\nfour"' if i % 3 == 0 else f"plain {i}"
        records.append(f"r{i:03d},{text},{i}")
        starts.append(line)
        line += 4 if i % 3 == 0 else 1
    (tmp_path / "q.csv").write_text("\n".join(records) + "\n")
    for bs in BLOCKSIZES:
        assert row_lines(tmp_path, "q.csv", "csv", bs) == starts, bs
    # without a header row the first record is line 1
    (tmp_path / "n.csv").write_text("\n".join(records[1:]) + "\n")
    for bs in BLOCKSIZES:
        assert row_lines(tmp_path, "n.csv", "csv", bs, header=None) == [s - 1 for s in starts], bs


@pytest.mark.parametrize(
    "text",
    [
        # malformed rows (wrong field counts) between quoted newlines: read record by record
        b'a,b,c\n1,"x\ny",3\n1,2\n4,5,6,7\n' * 40,
        # a quote never closed: its record is its first line alone, reading goes on after it
        b"a,b,c\n" + b"1,2,3\n" * 50 + b'4,"5,6\n7,8,9\n' + b"1,2,3\n" * 20,
        # CRLF line ends, blank lines and quoted CRLFs
        b'a,b,c\r\n1,"x\r\ny",3\r\n\r\n4,5,6\r\n' * 40,
    ],
)
def test_csv_lines_of_dirty_files_do_not_depend_on_the_blocksize(tmp_path, text):
    (tmp_path / "d.csv").write_bytes(text)
    expected = row_lines(tmp_path, "d.csv", "csv", 1 << 20)
    assert None not in expected and expected == sorted(set(expected))
    for bs in BLOCKSIZES:
        assert row_lines(tmp_path, "d.csv", "csv", bs) == expected, bs


def test_csv_lines_of_a_malformed_file_point_at_its_records(tmp_path):
    (tmp_path / "m.csv").write_bytes(b'a,b\n1,"x\ny"\n2,3,4\n\n5,6\n')
    assert row_lines(tmp_path, "m.csv", "csv", 1 << 20) == [2, 4, 6]


def test_jsonl_lines_skip_blank_lines(tmp_path):
    lines = []
    for i in range(200):
        lines.append(json.dumps({"id": i}) if i % 7 else "")
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    expected = [i + 1 for i in range(200) if i % 7]
    for bs in BLOCKSIZES:
        assert row_lines(tmp_path, "a.jsonl", "jsonl", bs) == expected, bs


def quarantine_rows(project, name: str, version: str) -> list[dict]:
    path = project.store.path(name, "versions", version, REJECTED_NAME)
    return pq.read_table(path).to_pylist()


def test_the_quarantine_keeps_row_and_line(project, in_process):
    """Rejects from the reader, a validate stage and duplicate keys, in later partitions."""
    body = []
    for i in range(60):
        text = f'"a {i}\nb"' if i % 2 == 0 else "plain"
        v = "x" if i == 41 else str(-1 if i == 50 else i)
        body.append(f"k{i % 55:02d},{text},{v}")
    body.insert(29, "k99,too,many,fields")
    project.write("raw/a.csv", "id,text,v\n" + "\n".join(body) + "\n")
    # 1-based record -> the line it starts on
    line = {k + 1: 2 + sum(b.count("\n") + 1 for b in body[:k]) for k in range(len(body))}
    project.pipeline("""\
        name: lines
        source: {path: raw/a.csv, format: csv, options: {blocksize: 200, dtype: {v: int64}}}
        stages:
          - validate: {v: {min: 0}}
        sample: {key: id, fields: {cls: v}}
        max_rejected: 0.5
        """)
    result = project.build(client=in_process)
    rows = quarantine_rows(project, "lines", result.manifest.version)
    assert {(r["stage"], r["row"], r["line"]) for r in rows} == {
        ("source", 30, line[30]),  # too many fields
        ("source", 43, line[43]),  # 'x' is not int64
        ("stages[0].validate", 52, line[52]),  # -1 below min 0
        *(("sample", k, line[k]) for k in range(57, 62)),  # keys k00..k04 again
    }
    assert line[30] == 46 and all(r["source"] == "raw/a.csv" for r in rows)


def test_lines_survive_an_incremental_rebuild(project, in_process):
    """A partition whose report the rebuild takes from its parent keeps its rejects' lines, and the
    partitions after it still count its newlines."""

    def write(name: str, rows: int) -> None:
        body = "".join(f'{name}{i:03d},"x\ny",{"bad" if i % 10 == 3 else i}\n' for i in range(rows))
        project.write(f"raw/{name}.csv", "id,t,v\n" + body)

    write("a", 40)
    write("b", 20)
    project.pipeline("""\
        name: again
        source: {path: raw/*.csv, format: csv, options: {blocksize: 150, dtype: {v: int64}}}
        sample: {key: id, fields: {cls: v}}
        max_rejected: 0.5
        """)
    first = project.build(client=in_process)
    write("b", 30)
    again = project.build(client=in_process)
    assert again.incremental.partitions.reused > 0
    got = [
        (r["source"], r["row"], r["line"])
        for r in quarantine_rows(project, "again", again.manifest.version)
    ]
    # record i of a file (0-based) is row i + 1 and starts on line 2 + 2 i
    expected = [
        (f"raw/{f}.csv", i + 1, 2 + 2 * i) for f, n in (("a", 40), ("b", 30)) for i in range(n)
    ]
    assert got == [e for e in expected if e[1] % 10 == 4]
    old = quarantine_rows(project, "again", first.manifest.version)
    assert [(r["row"], r["line"]) for r in old if r["source"] == "raw/a.csv"] == [
        (r, line) for _, r, line in got if _ == "raw/a.csv"
    ]


def test_a_carriage_return_inside_quotes_is_not_a_line(tmp_path):
    (tmp_path / "cr.csv").write_bytes(b"a,b\n" + b'1,"x\ry"\n2,"p\r\nq"\n3,z\n' * 30)
    expected = [2 + 4 * k + j for k in range(30) for j in (0, 1, 3)]
    for bs in BLOCKSIZES:
        assert row_lines(tmp_path, "cr.csv", "csv", bs) == expected, bs
