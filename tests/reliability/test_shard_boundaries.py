"""Truncation at every header boundary, hostile tar members met by the loader, `datapipe inspect`
and `datapipe verify`, and a TFRecord length field larger than the file.

Truncated: a tar shard cut at each 512-byte header start and end, each payload end and each padded
member end; a TFRecord shard cut at each length, length-CRC, payload and payload-CRC boundary. A
scan (no index) raises ShardCorruptError naming the shard, except where the format cannot tell
(documented below); a read through the index always does (the index records the shard's size).
"""

import io
import logging
import os
import tarfile
import tracemalloc

import pytest
from helpers.cli import datapipe_in_process
from sample_data import plain, simple_samples

import datapipe
from datapipe.errors import ShardCorruptError
from datapipe.formats.shards import build_index, open_shard, write_shard
from datapipe.formats.tar.headers import BLOCK, ZERO_BLOCK, parse_header
from datapipe.formats.tfrecord.framing import CRC, LENGTH, masked_crc
from datapipe.storage.fs import sha256_of
from datapipe.versioning.manifest import Manifest, ShardEntry
from datapipe.versioning.store import Store

# 700-byte payloads: each member ends inside a block, then padding
SAMPLES = simple_samples(3, size=700)


def tar_boundaries(data: bytes) -> dict[int, str]:
    """Offset -> what ends or starts there, for every member of a tar made by our writer."""
    cuts, pos = {}, 0
    while True:
        block = data[pos : pos + BLOCK]
        if block == ZERO_BLOCK:
            cuts[pos] = "end-of-archive marker start"
            cuts[pos + BLOCK] = "between the two end-of-archive blocks"
            return cuts
        size = parse_header(block).size
        cuts[pos] = "header start"
        cuts[pos + BLOCK] = "header end"
        cuts[pos + BLOCK + size] = "payload end"
        pos += BLOCK + size + (-size % BLOCK)


def tfrecord_boundaries(data: bytes) -> dict[int, str]:
    cuts, pos = {}, 0
    while pos < len(data):
        (length,) = LENGTH.unpack_from(data, pos)
        cuts[pos] = "record start"
        cuts[pos + 8] = "length end"
        cuts[pos + 12] = "length CRC end"
        cuts[pos + 12 + length] = "payload end"
        pos += 16 + length
    return cuts


@pytest.fixture(params=["webdataset", "tfrecord"])
def shard(request, tmp_path):
    path = tmp_path / ("s.tar" if request.param == "webdataset" else "s.tfrecord")
    write_shard(path, SAMPLES, request.param)
    return path, request.param


def scan(path, index) -> list[dict]:
    with open_shard(path, index=index) as reader:
        return [plain(s) for s in reader]


def test_truncation_at_every_boundary(shard, tmp_path):
    path, fmt = shard
    data, full_index = path.read_bytes(), path.with_name(path.name + ".idx").read_bytes()
    boundaries = tar_boundaries(data) if fmt == "webdataset" else tfrecord_boundaries(data)
    expected = [plain(s) for s in SAMPLES]
    tried = 0
    for cut, where in sorted(boundaries.items()):
        if cut >= len(data):
            continue
        tried += 1
        cut_path = tmp_path / f"cut-{cut}{path.suffix}"
        cut_path.write_bytes(data[:cut])
        # by index (as the loader reads): the index knows the size, every cut is caught
        cut_path.with_name(cut_path.name + ".idx").write_bytes(full_index)
        with pytest.raises(ShardCorruptError, match=str(cut_path)):
            scan(cut_path, True)
        os.remove(cut_path.with_name(cut_path.name + ".idx"))
        # by scanning (a foreign shard, `datapipe inspect` without an index)
        if fmt == "webdataset" and where == "between the two end-of-archive blocks":
            # a lone zero block at EOF is accepted, as GNU tar does
            assert scan(cut_path, False) == expected
        elif fmt == "tfrecord" and where == "record start":
            # TFRecord has no end marker: a file cut between records is a valid, shorter file; only
            # the index (above) and the manifest's size and sha256 (`datapipe verify`) can tell
            got = scan(cut_path, False)
            assert got == expected[: len(got)] and len(got) < len(expected)
        else:
            with pytest.raises(ShardCorruptError, match=str(cut_path)) as err:
                scan(cut_path, False)
            assert f"byte {err.value.offset}" in str(err.value) or err.value.offset is None
        # in process (32 cuts); the installed `datapipe inspect` meets damaged shards in
        # test_hostile_shards.py
        out = datapipe_in_process("inspect", str(cut_path), "--n", "100", cwd=tmp_path)
        clean = (
            fmt == "webdataset"
            and where == "between the two end-of-archive blocks"
            or fmt == "tfrecord"
            and where == "record start"
        )
        assert out.returncode == (0 if clean else 4), (cut, where, out.stderr)
        if not clean:
            assert str(cut_path) in out.stderr and out.stderr.startswith("error: ")
    # 6 members x 3 + end marker; 3 records x 4
    assert tried == (3 * 2 * 3 + 2 if fmt == "webdataset" else 3 * 4)


def tar_with(entries) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = None, **kw) -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, len(data or b"")
    for k, v in kw.items():
        setattr(info, k, v)
    return info, data


HOSTILE = {
    "../escape.cls": member("../escape.cls", data=b"6"),
    "/abs.cls": member("/abs.cls", data=b"6"),
    "a/../../up.cls": member("a/../../up.cls", data=b"6"),
    "link.cls": member("link.cls", tarfile.SYMTYPE, linkname="/etc/passwd"),
    "hard.cls": member("hard.cls", tarfile.LNKTYPE, linkname="good0.cls"),
    "dev.cls": member("dev.cls", tarfile.CHRTYPE, devmajor=1, devminor=3),
    "fifo.cls": member("fifo.cls", tarfile.FIFOTYPE),
}


@pytest.fixture
def hostile_dataset(tmp_path):
    """A committed version whose one shard holds two good samples around every kind of hostile
    member; its index and manifest are consistent with the bytes (an attacker who can write the
    store can do this)."""
    entries = [member("good0.cls", data=b"1"), *HOSTILE.values(), member("good1.cls", data=b"2")]
    store = Store(str(tmp_path / "store"))
    writer = store.begin("hostile")
    shard_path = f"{writer.partial}/shard-000000.tar"
    with open(shard_path, "wb") as f:
        f.write(tar_with(entries))
    build_index(shard_path, "webdataset")
    fs = store.fs
    entry = ShardEntry(
        path="shard-000000.tar",
        samples=2,
        bytes=os.path.getsize(shard_path),
        sha256=sha256_of(fs, shard_path),
        index_path="shard-000000.tar.idx",
        index_bytes=os.path.getsize(shard_path + ".idx"),
        index_sha256=sha256_of(fs, shard_path + ".idx"),
    )
    manifest = writer.commit(
        Manifest(name="hostile", shard_format="webdataset", fields={"cls": "int"}, shards=(entry,))
    )
    return (
        tmp_path,
        f"{tmp_path}/store/hostile",
        store.path("hostile", "versions", manifest.version, "shard-000000.tar"),
    )


def listing(root) -> set[str]:
    return {str(p) for p in root.rglob("*")} | {str(p) for p in root.parent.iterdir()}


def test_hostile_members_are_skipped_by_loader_inspect_and_verify(hostile_dataset, caplog):
    tmp, url, shard = hostile_dataset
    before = listing(tmp)
    with caplog.at_level(logging.WARNING):
        got = [
            key
            for batch in datapipe.Loader(
                url, batch_size=1, num_workers=0, shuffle=False, verify=True
            )
            for key in batch["__key__"]
        ]
    assert got == ["good0", "good1"]
    # the files are what the manifest says: nothing to report
    out = datapipe_in_process("verify", url, cwd=tmp)
    assert out.returncode == 0, out.stdout + out.stderr
    out = datapipe_in_process("inspect", shard, "--n", "10", cwd=tmp)
    assert out.returncode == 0 and "[0] good0" in out.stdout and "[1] good1" in out.stdout, (
        out.stderr
    )
    # and by scanning, where each skip is logged naming the shard and the member
    os.remove(shard + ".idx")
    out = datapipe_in_process("inspect", shard, "--n", "10", cwd=tmp)
    assert out.returncode == 0 and "[1] good1" in out.stdout and "[2]" not in out.stdout
    for name in HOSTILE:
        assert f"{shard}: skipping" in out.stderr and repr(name) in out.stderr, (name, out.stderr)
    out = datapipe_in_process("verify", url, cwd=tmp)
    # verify names what is gone
    assert out.returncode == 1 and f"missing: {shard}.idx" in out.stdout
    build_index(shard, "webdataset")
    assert datapipe_in_process("verify", url, cwd=tmp).returncode == 0
    assert listing(tmp) == before  # nothing extracted, linked or created anywhere
    for target in ("escape.cls", "up.cls"):
        assert not (tmp.parent / target).exists() and not (tmp / target).exists()


@pytest.mark.parametrize("length", [2**62, 2**63 + 5, "file size + 1"])
def test_tfrecord_length_beyond_the_file_allocates_nothing_like_it(tmp_path, length):
    path = tmp_path / "s.tfrecord"
    write_shard(path, simple_samples(2, size=64), "tfrecord", index=False)
    data = bytearray(path.read_bytes())
    value = len(data) + 1 if length == "file size + 1" else length % 2**64
    data[:8] = LENGTH.pack(value)
    # a consistent length CRC: only the bounds check is left
    data[8:12] = CRC.pack(masked_crc(bytes(data[:8])))
    path.write_bytes(bytes(data))
    tracemalloc.start()
    with (
        pytest.raises(ShardCorruptError, match=f"{path}.*claims {value} bytes"),
        open_shard(path) as reader,
    ):
        list(reader)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20
    out = datapipe_in_process("inspect", str(path), cwd=tmp_path)
    assert out.returncode == 4 and str(path) in out.stderr
