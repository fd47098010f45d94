"""A source file's hash is taken from the parent's records only while its stamp vouches for the
bytes."""

import os

from datapipe.builder.known_hashes import RACY_NS, records, trusted
from datapipe.builder.source.base import InputFile
from datapipe.builder.source.listing import stamp_of
from datapipe.versioning.manifest import SourceFile


def _file(tmp_path, name="a.csv", text="x,y\n1,2\n"):
    path = tmp_path / name
    path.write_text(text)
    return InputFile(str(path), name, path.stat().st_size, stamp=stamp_of(os.stat(path)))


def test_a_settled_file_with_the_same_stamp_is_trusted(tmp_path):
    f = _file(tmp_path)
    ctime = os.stat(f.path).st_ctime_ns
    kept = {"a.csv": [f.stamp, "sha256:abc", ctime + RACY_NS + 1]}
    assert trusted(kept, [f]) == {0: SourceFile("a.csv", f.size, "sha256:abc")}


def test_a_file_hashed_within_racy_ns_of_its_change_is_not(tmp_path):
    f = _file(tmp_path)
    ctime = os.stat(f.path).st_ctime_ns
    assert trusted({"a.csv": [f.stamp, "sha256:abc", ctime + RACY_NS]}, [f]) == {}


def test_any_write_changes_the_stamp(tmp_path):
    f = _file(tmp_path)
    before = os.stat(f.path)
    (tmp_path / "a.csv").write_text("x,y\n3,4\n")
    os.utime(f.path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = stamp_of(os.stat(f.path))
    assert after != f.stamp  # the ctime: no call sets it back
    replaced = _file(tmp_path, "b.csv", "x,y\n1,2\n")
    os.replace(replaced.path, f.path)
    assert stamp_of(os.stat(f.path)) not in (f.stamp, after)  # another inode


def test_files_without_a_stamp_or_a_record_are_read(tmp_path):
    f = _file(tmp_path)
    remote = InputFile("bucket/a.csv", "a.csv", f.size, etag="e1")
    assert trusted({"a.csv": [f.stamp, "sha256:abc", 0]}, [remote]) == {}
    assert trusted({}, [f]) == {}


def test_records_keep_the_listing_time_of_the_build_that_read_the_file(tmp_path):
    a, b = _file(tmp_path, "a.csv"), _file(tmp_path, "b.csv")
    hashes = [SourceFile("a.csv", a.size, "sha256:1"), SourceFile("b.csv", b.size, "sha256:2")]
    parent = {"a.csv": [a.stamp, "sha256:1", 5]}
    out = records([a, b], hashes, 99, parent, {0: hashes[0]})
    assert out == {"a.csv": [a.stamp, "sha256:1", 5], "b.csv": [b.stamp, "sha256:2", 99]}
