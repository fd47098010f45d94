"""The schema sample is read as the build reads the file: a carriage return alone inside an unquoted
CSV field (a bare CR) is text of its field, so the row stays whole and every row is read, and a
malformed early row votes on no column's type."""

import gzip

import pytest
from test_sources import read_all

from datapipe.builder.config import SourceConfig
from datapipe.builder.source.opening import open_source
from datapipe.errors import ConfigError

ROWS = 400
WITH_CR = (5, 9, 14)  # early rows, inside the schema sample


def posts(newline: str = "\n") -> bytes:
    """A CSV of posts whose rows WITH_CR hold a bare CR in their unquoted text."""
    lines = ["id,text,is_retweet,likes"]
    for i in range(ROWS):
        text = f"first line\rsecond of {i}" if i in WITH_CR else f"post {i}"
        lines.append(f"{i},{text},{'True' if i % 3 == 0 else 'False'},{i % 17}")
    return (newline.join(lines) + newline).encode()


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_the_sample_infers_the_columns_own_types(tmp_path, newline):
    (tmp_path / "posts.csv").write_bytes(posts(newline))
    source = open_source(SourceConfig(path="posts.csv", format="csv"), str(tmp_path))
    assert source.schema == {
        "id": "int64",
        "text": "string",
        "is_retweet": "bool",
        "likes": "int64",
    }
    assert source.sample is not None
    assert (source.sample.file, source.sample.rows, source.sample.set_aside) == (
        "posts.csv",
        ROWS,
        0,
    )
    assert source.sample.bytes == len(posts(newline))


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_every_row_is_read_whole_at_every_blocksize(tmp_path, newline):
    (tmp_path / "posts.csv").write_bytes(posts(newline))
    results = {bs: read_all(tmp_path, "posts.csv", bs) for bs in (64, 300, 1 << 20)}
    rows, rejects, read, _ = results[1 << 20]
    assert (len(rows), rejects, read) == (ROWS, [], ROWS)
    assert rows[5] == (5, "first line\rsecond of 5", False, 5)
    assert rows[6] == (6, "post 6", True, 6)
    for bs, result in results.items():
        assert result[:3] == results[1 << 20][:3], bs


def test_a_file_read_whole_keeps_the_cr_in_its_field_too(tmp_path):
    """A compressed file is one partition that pandas would read unchecked: a bare CR still sends
    it record by record."""
    (tmp_path / "posts.csv.gz").write_bytes(gzip.compress(posts()))
    rows, rejects, read, parts = read_all(tmp_path, "posts.csv.gz", 1 << 20)
    assert (parts, len(rows), rejects, read) == (1, ROWS, [], ROWS)
    assert rows[9] == (9, "first line\rsecond of 9", True, 9)


def test_a_bare_cr_in_the_first_record_of_a_file_without_header(tmp_path):
    (tmp_path / "n.csv").write_bytes(b"1,a\rb,x\n2,c,y\n" * 30)
    rows, rejects, read, _ = read_all(tmp_path, "n.csv", 40, header=None)
    assert (rejects, read) == ([], 60)
    assert rows[:2] == [(1, "a\rb", "x"), (2, "c", "y")]


def test_lines_ending_with_a_bare_cr_are_named_with_the_option_that_reads_them(tmp_path):
    (tmp_path / "mac.csv").write_bytes(posts().replace(b"\r", b" ").replace(b"\n", b"\r"))
    with pytest.raises(ConfigError) as e:
        open_source(SourceConfig(path="mac.csv", format="csv"), str(tmp_path))
    assert "mac.csv: its lines end with a bare carriage return" in str(e.value)
    assert 'source.options.lineterminator: "\\r"' in str(e.value)
    rows, rejects, read, _ = read_all(tmp_path, "mac.csv", 1 << 20, lineterminator="\r")
    assert (len(rows), rejects, read) == (ROWS, [], ROWS)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("7,short\n", "expected 4 fields, saw 2"),
        ("7,too,many,fields,here\n", "expected 4 fields, saw 5"),
        ('7,a "stray" quote,True,3\n', None),
    ],
)
def test_a_malformed_early_row_votes_on_no_type(tmp_path, bad, reason):
    """pandas pads a short row with NaN (an int column would be inferred float) and shifts a long
    one; the build rejects both, so the sample does not count them."""
    lines = posts().decode().splitlines(keepends=True)
    (tmp_path / "p.csv").write_text("".join(lines[:4] + [bad] + lines[4:]))
    source = open_source(SourceConfig(path="p.csv", format="csv"), str(tmp_path))
    assert source.schema == {
        "id": "int64",
        "text": "string",
        "is_retweet": "bool",
        "likes": "int64",
    }
    rows, rejects, read, _ = read_all(tmp_path, "p.csv", 1 << 20)
    assert read == ROWS + 1
    assert [r for _, r in rejects] == ([reason] if reason else [])
