"""Our tars read by GNU tar, tarfile and webdataset; theirs (and hostile ones) read by us."""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from sample_data import payload, plain, simple_samples

from datapipe.errors import ShardCorruptError
from datapipe.formats.base import KEY
from datapipe.formats.shards import build_index, open_shard, write_shard
from datapipe.formats.tar.headers import member_header

LONG_KEY = "ключ-" + "x" * 150  # non-ASCII and longer than ustar's 100 bytes: needs pax
SAMPLES = [
    *simple_samples(20, size=1000),
    {KEY: LONG_KEY, "json": b'{"a": 1}', "seg.png": payload(3000, 1)},
    {KEY: "日本語", "txt": "héllo".encode()},
]


@pytest.fixture
def shard(tmp_path) -> Path:
    path = tmp_path / "ours.tar"
    write_shard(path, SAMPLES)
    return path


def members_of(samples) -> list[tuple[str, bytes]]:
    return [(f"{s[KEY]}.{f}", bytes(s[f])) for s in samples for f in sorted(s) if f != KEY]


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar is not installed")
def test_gnu_tar_lists_and_extracts(shard, tmp_path):
    listing = subprocess.run(["tar", "tf", str(shard)], capture_output=True, text=True, check=True)
    assert listing.stdout.splitlines() == [name for name, _ in members_of(SAMPLES)]
    assert listing.stderr == ""  # no warnings (e.g. about headers or a lone zero block)
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(["tar", "xf", str(shard), "-C", str(out)], check=True)
    for name, data in members_of(SAMPLES):
        assert (out / name).read_bytes() == data


def test_tarfile_reads_names_payloads_and_metadata(shard):
    with tarfile.open(shard) as tar:
        infos = tar.getmembers()
        assert [(i.name, tar.extractfile(i).read()) for i in infos] == members_of(SAMPLES)
        assert {(i.mtime, i.uid, i.gid, i.uname, i.gname, i.mode) for i in infos} == {
            (0, 0, 0, "", "", 0o644)
        }


def test_pax_only_where_ustar_cannot_hold_the_name():
    assert len(member_header("short.cls", 10)) == 512
    assert len(member_header("a" * 96 + ".cls", 10)) == 512  # exactly 100 bytes fits
    assert len(member_header("a" * 97 + ".cls", 10)) > 512
    assert len(member_header("é.cls", 10)) > 512
    assert len(member_header("big.bin", 8**11)) > 512


def test_webdataset_reads_our_shards(shard):
    import webdataset as wds

    got = [
        {k: v for k, v in s.items() if k == KEY or not k.startswith("__")}  # drop __url__ etc.
        for s in wds.WebDataset(str(shard), shardshuffle=False, empty_check=False)
    ]
    assert got == [plain(s) for s in SAMPLES]


def test_we_read_webdataset_tarwriter_output(tmp_path):
    import webdataset as wds

    path = tmp_path / "theirs.tar"
    samples = [
        {KEY: f"s{i:04d}", "cls": str(i).encode(), "bin": payload(i * 37, i)} for i in range(50)
    ]
    with wds.TarWriter(str(path)) as sink:  # pax headers with float mtimes on every member
        for s in samples:
            sink.write(dict(s))
    with open_shard(path) as reader:
        assert [plain(s) for s in reader] == samples
    build_index(path)
    with open_shard(path) as reader:
        assert len(reader) == 50
        assert plain(reader[49]) == samples[49]


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar is not installed")
@pytest.mark.parametrize("tar_format", ["gnu", "pax", "ustar"])
def test_we_read_gnu_tar_of_class_folders(tmp_path, tar_format):
    root = tmp_path / "src"
    deep = "d" * 60 if tar_format != "ustar" else "d"  # ustar cannot hold the long names
    expected = {}
    for cls in ("cat", "dog"):
        folder = root / "train" / cls / deep
        folder.mkdir(parents=True)
        for i in range(3):
            data = payload(700 + i, hash((cls, i)))
            (folder / f"{cls}{i:03d}{'e' * 50}.jpg").write_bytes(data)
            (folder / f"{cls}{i:03d}{'e' * 50}.cls").write_bytes(cls.encode())
            expected[f"train/{cls}/{deep}/{cls}{i:03d}{'e' * 50}"] = {
                "jpg": data,
                "cls": cls.encode(),
            }
    path = tmp_path / f"gnu-{tar_format}.tar"
    subprocess.run(
        ["tar", "cf", str(path), f"--format={tar_format}", "--sort=name", "-C", str(root), "train"],
        check=True,
    )
    with open_shard(path) as reader:
        got = {s[KEY]: {k: bytes(v) for k, v in s.items() if k != KEY} for s in reader}
    assert got == expected
    build_index(path)
    with open_shard(path) as reader:
        assert sorted(reader.keys()) == sorted(expected)


def _tar_with(entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _info(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, **kw) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    for k, v in kw.items():
        setattr(info, k, v)
    return info


def test_hostile_members_are_skipped_with_a_warning(tmp_path, caplog):
    good = b"fine"
    entries = [
        (_info("ok.txt", size=4), good),
        (_info("link.txt", tarfile.SYMTYPE, linkname="/etc/passwd"), None),
        (_info("hard.txt", tarfile.LNKTYPE, linkname="ok.txt"), None),
        (_info("dev.txt", tarfile.CHRTYPE, devmajor=1, devminor=3), None),
        (_info("fifo.txt", tarfile.FIFOTYPE), None),
        (_info("/etc/passwd.txt", size=4), b"evil"),
        (_info("../escape.txt", size=4), b"evil"),
        (_info("a/../../b.txt", size=4), b"evil"),
        (_info("dir", tarfile.DIRTYPE), None),
        (_info("also.txt", size=4), good),
    ]
    path = tmp_path / "hostile.tar"
    path.write_bytes(_tar_with(entries))
    with caplog.at_level(logging.WARNING), open_shard(path) as reader:
        got = [plain(s) for s in reader]
    assert got == [{KEY: "ok", "txt": good}, {KEY: "also", "txt": good}]
    warned = caplog.text
    for name in (
        "link.txt",
        "hard.txt",
        "dev.txt",
        "fifo.txt",
        "/etc/passwd.txt",
        "../escape.txt",
        "a/../../b.txt",
    ):
        assert name in warned
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path.parent / "escape.txt").exists()


def _base256(value: int, width: int = 12) -> bytes:
    return bytes([0x80]) + value.to_bytes(width - 1, "big")


def _with_size_field(block: bytes, field: bytes) -> bytes:
    block = bytearray(block)
    block[124:136] = field
    block[148:156] = b"        "
    block[148:156] = b"%06o\x00 " % sum(block)
    return bytes(block)


@pytest.mark.parametrize("size_field", [_base256(2**63), _base256(2**40), b"77777777777\x00"])
def test_huge_size_field_is_corrupt_not_an_allocation(tmp_path, size_field):
    header = _with_size_field(member_header("k.bin", 4), size_field)
    path = tmp_path / "huge.tar"
    path.write_bytes(header + b"data" + bytes(508) + bytes(1024))
    with pytest.raises(ShardCorruptError, match="claims") as err:
        with open_shard(path) as reader:
            list(reader)
    assert str(path) in str(err.value)


def test_negative_base256_size_is_corrupt(tmp_path):
    header = _with_size_field(member_header("k.bin", 4), b"\xff" * 12)
    path = tmp_path / "neg.tar"
    path.write_bytes(header + bytes(512 + 1024))
    with pytest.raises(ShardCorruptError, match="negative"), open_shard(path) as reader:
        list(reader)


def test_duplicate_field_in_foreign_tar_is_corrupt(tmp_path):
    path = tmp_path / "dup.tar"
    path.write_bytes(_tar_with([(_info("a.txt", size=1), b"1"), (_info("a.txt", size=1), b"2")]))
    with pytest.raises(ShardCorruptError, match="twice"), open_shard(path) as reader:
        list(reader)
