"""Planning and reading the source: CSV blocks cut only between records, so rows never depend on the
blocksize."""

import os
import typing

import pandas as pd
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datapipe.builder.config import SourceConfig
from datapipe.builder.source.base import InputFile
from datapipe.builder.source.csvfile import csv_layout
from datapipe.builder.source.opening import open_source, partition_source, partitioned_source
from datapipe.builder.source.partition import byte_blocks, file_groups
from datapipe.builder.source.registry import SOURCE_FORMATS, read_part
from datapipe.errors import ConfigError


def quoted_newlines(rows: int = 300) -> bytes:
    lines = ["id,text,label"]
    for i in range(rows):
        text = (
            f'"line one of {i}\nline two, with ""quotes"" and a comma\n\nthree"'
            if i % 3 == 0
            else f"plain {i}"
        )
        lines.append(f"r{i:04d},{text},{i % 10}")
    return ("\n".join(lines) + "\n").encode()


def read_all(
    root, name: str, blocksize: int, **options
) -> tuple[list[tuple], list[tuple], int, int]:
    """(rows, (row in file, reason) of rejects, rows read, partitions) of the whole source at
    ``blocksize``."""
    plan = partitioned_source(
        SourceConfig(path=name, format="csv", options={"blocksize": blocksize, **options}),
        str(root),
    )
    rows, rejects, offset = [], [], 0
    for part in plan.parts:
        raw = read_part(plan, part)
        rows.extend(
            tuple(None if pd.isna(v) else v for v in r) for r in raw.frame.itertuples(index=False)
        )
        rejects.extend((offset + row, reason) for row, reason, _ in raw.rejects)
        offset += raw.rows_in
    return rows, sorted(rejects), offset, len(plan.parts)


BLOCKSIZES = [64, 100, 257, 1000, 4096, 1 << 20]


def test_quoted_newlines_never_split_a_row(tmp_path):
    (tmp_path / "q.csv").write_bytes(quoted_newlines())
    results = {bs: read_all(tmp_path, "q.csv", bs) for bs in BLOCKSIZES}
    rows, rejects, read, parts = results[1 << 20]
    assert parts == 1 and read == 300 and rejects == [] and len(rows) == 300
    assert rows[0] == ("r0000", 'line one of 0\nline two, with "quotes" and a comma\n\nthree', 0)
    assert results[100][3] > 50  # many blocks, each cut between records
    for bs, result in results.items():
        assert result[:3] == results[1 << 20][:3], bs


@pytest.mark.parametrize(
    "text",
    [
        # a stray quote inside an unquoted field, then a quoted field with a newline: pandas and
        # quote parity disagree on where records end; every blocksize must still give the same rows
        # and rejects
        b'a,b,c\n1,b"c,"x\ny"\n2,3,4\n5,6,7\n8,"9\n9",10\n' * 20,
        # a quote that is never closed, after good rows
        b"a,b,c\n" + b"1,2,3\n" * 50 + b'4,"5,6\n7,8,9\n' + b"1,2,3\n" * 20,
        # CRLF line ends, blank lines and quoted CRLFs
        b'a,b,c\r\n1,"x\r\ny",3\r\n\r\n4,5,6\r\n' * 40,
        # malformed rows (wrong field counts) between quoted newlines
        b'a,b,c\n1,"x\ny",3\n1,2\n4,5,6,7\n' * 40,
        # text after a closing quote (pandas reads "x"y as xy) next to short rows
        b"a,b,c\n"
        + (b'1,"x"y,3\n' + b"6,7,8\n" * 12 + b'4,5\n9,"p""q",0\n' + b"6,7,8\n" * 12) * 10,
    ],
)
def test_rows_and_rejects_do_not_depend_on_the_blocksize(tmp_path, text):
    (tmp_path / "d.csv").write_bytes(text)
    results = {bs: read_all(tmp_path, "d.csv", bs) for bs in BLOCKSIZES}
    expected = results[1 << 20][:3]
    assert expected[2] > 0
    for bs, result in results.items():
        assert result[:3] == expected, bs


def test_no_header_reads_every_row_once(tmp_path):
    (tmp_path / "n.csv").write_text("".join(f"r{i:04d},v{i},{i % 10}\n" for i in range(300)))
    for bs in BLOCKSIZES:
        rows, rejects, read, _ = read_all(tmp_path, "n.csv", bs, header=None)
        assert (len(rows), rejects, read) == (300, [], 300), bs
        assert rows[0] == ("r0000", "v0", 0) and rows[-1] == ("r0299", "v299", 9)
    # names given: no header row either
    rows, *_ = read_all(tmp_path, "n.csv", 64, names=["id", "v", "label"])
    assert len(rows) == 300 and rows[0] == ("r0000", "v0", 0)


def test_no_header_with_malformed_rows_keeps_row_numbers(tmp_path):
    (tmp_path / "n.csv").write_text("a,1\nb,2,3\nc,3\n" * 30)
    for bs in (32, 1 << 20):
        rows, rejects, read, _ = read_all(tmp_path, "n.csv", bs, header=None)
        assert (
            read == 90
            and len(rows) == 60
            and rejects[:2] == [(1, "expected 2 fields, saw 3"), (4, "expected 2 fields, saw 3")]
        ), bs
        assert rows[:2] == [("a", 1), ("c", 3)]


@pytest.mark.parametrize(
    "options",
    [
        {"skiprows": 2},
        {"header": 1},
        {"comment": "#"},
        {"nrows": 5},
        {"encoding": "utf-16"},
        {"escapechar": "\\"},
    ],
)
def test_options_that_count_lines_from_the_top_read_whole_files(tmp_path, options):
    (tmp_path / "a.csv").write_text("x,y\n" * 200, encoding=options.get("encoding", "utf-8"))
    plan = partitioned_source(
        SourceConfig(path="a.csv", format="csv", options={"blocksize": 64, **options}),
        str(tmp_path),
    )
    assert len(plan.parts) == 1 and plan.parts[0].length is None
    assert csv_layout(options)[0]


def test_quoting_off_needs_no_scan(tmp_path):
    (tmp_path / "a.csv").write_text('x,y\n"1,2\n' * 100)
    plan = partitioned_source(
        SourceConfig(path="a.csv", format="csv", options={"blocksize": 64, "quoting": 3}),
        str(tmp_path),
    )
    assert plan.quote is None and len(plan.parts) > 1 and not any(p.exact for p in plan.parts)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("blocksize", "lots", r"source.options.blocksize: not a size"),
        ("blocksize", 0, r"source.options.blocksize: must be at least 1 byte"),
        (
            "files_per_partition",
            "many",
            r"source.options.files_per_partition: must be a whole number",
        ),
        ("files_per_partition", 0, r"source.options.files_per_partition: must be a whole number"),
    ],
)
def test_bad_partitioning_options_name_the_key(tmp_path, key, value, expected):
    """In the pipeline file they are caught with their line (test_cli); given to partitioned_source
    directly, too."""
    (tmp_path / "a.csv").write_text("x,y\n1,2\n")
    fmt = "files" if key == "files_per_partition" else "csv"
    with pytest.raises(ConfigError, match=expected):
        partitioned_source(
            SourceConfig(path="a.csv", format=fmt), str(tmp_path), execution={key: value}
        )
    with pytest.raises(pydantic.ValidationError, match=key):
        SourceConfig(path="a.csv", format=fmt, options={key: value})


def test_jsonl_reads_in_the_given_encoding(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(
        '{"id": "café", "n": 1}\n{"id": "naïve", "n": 2}\n'.encode("latin-1")
    )
    for options, ids, rejects in [({"encoding": "latin-1"}, ["café", "naïve"], 0), ({}, [], 2)]:
        plan = partitioned_source(
            SourceConfig(path="a.jsonl", format="jsonl", options=options), str(tmp_path)
        )
        raw = read_part(plan, plan.parts[0])
        assert list(raw.frame.get("id", [])) == ids and len(raw.rejects) == rejects
    assert raw.rejects[0][1] == "invalid utf-8"


def test_parquet_reads_only_the_given_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"id": ["a", "b"], "x": [1, 2], "big": [b"x" * 10, b"y" * 10]}),
        tmp_path / "t.parquet",
    )
    plan = partitioned_source(
        SourceConfig(path="t.parquet", format="parquet", options={"columns": ["id", "x"]}),
        str(tmp_path),
    )
    assert list(read_part(plan, plan.parts[0]).frame.columns) == ["id", "x"]


@pytest.mark.parametrize(
    ("fmt", "options", "expected"),
    [
        (
            "jsonl",
            {"sep": ";"},
            "options.sep: the jsonl reader does not take this option; it takes "
            "blocksize, dtype, encoding",
        ),
        ("jsonl", {"encoding": "utf-16"}, "options.encoding: JSON lines are read line by line"),
        ("jsonl", {"encoding": "klingon"}, "options.encoding: unknown encoding"),
        (
            "files",
            {"encoding": "utf-8"},
            "options.encoding: the files reader does not take this option",
        ),
        (
            "parquet",
            {"dtype": {"a": "int64"}},
            "options.dtype: the parquet reader does not take this option",
        ),
        ("csv", {"chunksize": 5}, "options.chunksize: the csv reader does not take this option"),
    ],
)
def test_options_a_reader_does_not_take_are_errors(fmt, options, expected):
    with pytest.raises(pydantic.ValidationError) as e:
        SourceConfig(path="x", format=fmt, options=options)
    assert expected in str(e.value)


def test_files_partitions_are_bounded_in_bytes_as_well_as_in_count(tmp_path):
    sizes = [1000] * 6 + [5000] + [10] * 5  # sorted by name: f00 .. f11
    for i, size in enumerate(sizes):
        (tmp_path / "img").mkdir(exist_ok=True)
        (tmp_path / "img" / f"f{i:02d}.bin").write_bytes(bytes([i]) * size)
    plan = partitioned_source(
        SourceConfig(path="img/*.bin", format="files", options={"blocksize": 2500}), str(tmp_path)
    )
    groups = [[int(plan.files[m].label[-6:-4]) for m in p.members] for p in plan.parts]
    assert groups == [[0, 1], [2, 3], [4, 5], [6], [7, 8, 9, 10, 11]]  # the 5000-byte file alone
    for part in plan.parts:
        assert sum(plan.files[m].size for m in part.members) <= 2500 or len(part.members) == 1
    plan = partitioned_source(
        SourceConfig(path="img/*.bin", format="files", options={"files_per_partition": 2}),
        str(tmp_path),
    )
    # the default 64 MiB does not bind here
    assert [len(p.members) for p in plan.parts] == [2, 2, 2, 2, 2, 2]
    raw = read_part(plan, plan.parts[3])
    assert (
        list(raw.frame["name"]) == ["f06.bin", "f07.bin"]
        and raw.frame["bytes"][0] == b"\x06" * 5000
    )
    assert list(raw.frame["parent"]) == ["img", "img"]


def test_a_file_larger_than_a_worker_can_hold_fails_before_the_passes(tmp_path):
    from datapipe.builder.sizing import FILE_COPIES, check_file_sizes
    from datapipe.errors import BuildError

    (tmp_path / "small.bin").write_bytes(b"x" * 100)
    (tmp_path / "big.bin").write_bytes(b"x" * 1000)
    plan = partitioned_source(SourceConfig(path="*.bin", format="files"), str(tmp_path))
    check_file_sizes(plan, [FILE_COPIES * 1000, 10**9])  # fits every worker
    check_file_sizes(plan, [0, 10])  # a worker without a limit: nothing to check against
    with pytest.raises(
        BuildError, match=r"big.bin: 1000 bytes, one sample read whole .* a worker has 2999 bytes"
    ):
        check_file_sizes(plan, [FILE_COPIES * 1000 - 1, 10**9])


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=st.text(alphabet='ab,"\n \r\t', max_size=160), header=st.booleans())
def test_any_csv_reads_the_same_at_every_blocksize(tmp_path_factory, body, header):
    """Quotes, stray quotes, CRs, blank lines and ragged rows: the rows, the rejects and their row
    numbers are the same whether the file is one block or cut into many."""
    root = tmp_path_factory.mktemp("csv")
    (root / "f.csv").write_bytes((("h1,h2\n" if header else "") + body).encode())
    options = {} if header else {"header": None}

    def read(blocksize):
        try:
            return read_all(root, "f.csv", blocksize, **options)[:3]
        except Exception as e:  # the same error at every blocksize is the same outcome
            return f"{type(e).__name__}: {e}"

    expected = read(1 << 20)
    for blocksize in (7, 16, 33):
        assert read(blocksize) == expected, blocksize


def test_every_source_format_has_a_reader():
    assert set(SOURCE_FORMATS) == set(
        typing.get_args(SourceConfig.model_fields["format"].annotation)
    )


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "files"])
def test_a_source_opened_once_partitions_at_any_blocksize_without_reading_it(tmp_path, fmt):
    """The files are listed and sampled once (open_source); partition_source is pure: the same parts
    as a source planned afresh at that blocksize, with the files gone."""
    line = {
        "csv": 'r{i},"two\nlines {i}",{i}\n',
        "jsonl": '{{"id": "r{i}", "n": {i}}}\n',
        "files": "x{i}\n",
    }[fmt]
    path = "d/*" if fmt == "files" else f"a.{fmt}"
    body = "".join(line.format(i=i) for i in range(200))
    if fmt == "files":
        (tmp_path / "d").mkdir()
        for n in range(3):
            (tmp_path / "d" / f"f{n}").write_text(body)
    else:
        (tmp_path / f"a.{fmt}").write_text(("id,text,n\n" if fmt == "csv" else "") + body)
    config = SourceConfig(path=path, format=fmt)
    fresh = {
        bs: partitioned_source(config, str(tmp_path), execution={"blocksize": bs}, align=False)
        for bs in (100, 700, 64 << 20)
    }
    opened = open_source(config, str(tmp_path))
    assert opened.parts == () and opened.schema == fresh[100].schema
    for f in opened.files:
        os.remove(f.path)
    for bs, source in fresh.items():
        cut = partition_source(opened, bs)
        assert (cut.parts, cut.unaligned) == (source.parts, source.unaligned) and len(
            cut.parts
        ) >= 1
    # the configured (default) blocksize
    assert partition_source(opened).parts == fresh[64 << 20].parts
    assert len(fresh[100].parts) >= len(fresh[700].parts) > len(fresh[64 << 20].parts)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 5000), max_size=12),
    blocksize=st.integers(1, 3000),
    per=st.integers(1, 5),
    gz=st.booleans(),
)
def test_partitions_cover_every_byte_and_file_once_in_order(sizes, blocksize, per, gz):
    files = [
        InputFile(f"f{i}.csv" + (".gz" if gz and i % 2 else ""), f"f{i}", size)
        for i, size in enumerate(sizes)
    ]
    blocks = byte_blocks(files, blocksize)
    assert [p.number for p in blocks] == list(range(len(blocks)))
    for i, f in enumerate(files):
        mine = [p for p in blocks if p.file == i]
        if f.size == 0 or f.path.endswith(".gz"):
            assert [(p.start, p.length) for p in mine] == [(0, None)]
        else:
            assert [p.start for p in mine] == list(range(0, f.size, blocksize))
    groups = file_groups(files, per, blocksize)
    assert [m for p in groups for m in p.members] == list(range(len(files)))
    for p in groups:
        assert p.file == p.members[0] and len(p.members) <= per
        assert len(p.members) == 1 or sum(files[m].size for m in p.members) <= blocksize


def fields_per_record(data: bytes, sep: int, quote: int) -> list[int]:
    """record_fields' model, byte by byte: records end at newlines outside quotes, fields at
    separators outside quotes; records of blank bytes only are left out."""
    counts, fields, quoted, blank = [], 1, False, True
    for i, byte in enumerate(data):
        if byte == quote:
            quoted = not quoted
        elif not quoted and byte == sep:
            fields += 1
        blank = blank and byte in b" \t\r\n"
        if (byte == 10 and not quoted) or i == len(data) - 1:
            if not blank:
                counts.append(fields)
            fields, blank = 1, True
    return counts


FIELD = st.sampled_from([b"", b"a", b"bc", b" d", b'"q,\n r"', b'""', b'"a""b"', b"\t"])
RECORD = st.one_of(
    st.lists(FIELD, min_size=1, max_size=5).map(b",".join), st.sampled_from([b" ", b"\t", b""])
)


@given(st.lists(RECORD, max_size=12), st.sampled_from([b"\n", b"\r\n"]), st.booleans())
def test_record_fields_counts_each_records_fields_as_the_record_model_does(
    records, newline, last_newline
):
    from datapipe.builder.source.csv_records import record_fields

    data = newline.join(records) + (newline if last_newline and records else b"")
    got = record_fields(data, ord(","), ord('"'))
    assert got is not None, data  # well-formed quoting, CRLF line ends: the numpy model reads it
    assert got.tolist() == fields_per_record(data, ord(","), ord('"')), data


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.sampled_from([b"a", b",", b"\n", b'"', b'""', b"xyz" * 5]), max_size=40), st.data()
)
def test_the_quote_scan_of_a_block_finds_what_a_byte_by_byte_count_does(
    tmp_path, monkeypatch, pieces, data
):
    import fsspec

    from datapipe.builder.source import align

    body = b"".join(pieces)
    start = data.draw(st.integers(0, len(body)))
    length = data.draw(st.integers(0, len(body) - start))
    # chunks of every kind
    monkeypatch.setattr(align, "SCAN_CHUNK", data.draw(st.sampled_from([1, 4, 9, 1 << 20])))
    path = tmp_path / "quoted.csv"
    path.write_bytes(body)
    parity, first = 0, [-1, -1]
    for offset in range(start, start + length):
        parity ^= body[offset] == ord('"')
        if body[offset] == 10 and first[parity] < 0:
            first[parity] = offset
    got = align.scan_block(fsspec.filesystem("file"), str(path), start, length, ord('"'))
    assert (got.parity, got.first_even, got.first_odd) == (parity, first[0], first[1])
