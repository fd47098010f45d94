"""Corrupt and hostile shards met by the loader, `datapipe inspect` and `datapipe verify`:
ShardCorruptError (or the documented skip) naming the shard; no hang, no write outside the cache, no
allocation larger than the file."""

import os
import tracemalloc

import pytest
from conftest import datapipe_cli
from helpers.cli import datapipe_in_process
from sample_data import make_dataset

import datapipe
from datapipe.errors import DatapipeError, ShardCorruptError
from datapipe.formats.shards import open_shard


@pytest.fixture(params=["webdataset", "tfrecord"])
def dataset(request, tmp_path):
    url = make_dataset(tmp_path / "store", sizes=[6, 6, 6], fmt=request.param)
    ds = datapipe.open_dataset(url)
    return url, [ds.shard_path(i) for i in range(3)], tmp_path


def damage(path, how):
    data = bytearray(open(path, "rb").read())
    if how == "flip header":
        data[5] ^= 0xFF
    elif how == "flip payload":
        data[len(data) // 2] ^= 0xFF
    elif how == "truncate":
        data = data[: len(data) // 2]
    elif how == "empty":
        data = bytearray()
    elif how == "length beyond file":  # a TFRecord length field / a tar size field claiming 2**62
        data[:8] = (2**62).to_bytes(8, "little") if path.endswith(".tfrecord") else data[:8]
        if path.endswith(".tar"):
            data[124:136] = b"\x80" + (2**62).to_bytes(11, "big")
    open(path, "wb").write(bytes(data))


HOW = ["flip header", "flip payload", "truncate", "empty", "length beyond file"]


def command(how):
    """The installed command for one kind of damage; the same command in process for the others (an
    interpreter start each)."""
    return datapipe_cli if how == "truncate" else datapipe_in_process


@pytest.mark.parametrize("how", HOW)
def test_inspect_and_scans_name_the_shard(dataset, how):
    url, shards, tmp = dataset
    damage(shards[1], how)
    out = command(how)("inspect", shards[1], "--n", "100", cwd=tmp)
    if how == "flip payload" and shards[1].endswith(".tar"):
        # tar has no payload checksums: verify (below) is what catches it
        assert out.returncode == 0
    else:
        assert out.returncode == 4 and shards[1] in out.stderr


@pytest.mark.parametrize("how", HOW)
def test_verify_names_the_damaged_file(dataset, how):
    url, shards, tmp = dataset
    damage(shards[1], how)
    out = command(how)("verify", url, cwd=tmp)
    assert out.returncode == 1 and f"mismatch: {shards[1]}" in out.stdout


@pytest.mark.parametrize("how", HOW)
def test_the_loader_raises_naming_the_shard_when_verification_is_on(dataset, how):
    url, shards, tmp = dataset
    damage(shards[1], how)
    before = sorted(os.listdir(tmp))
    with pytest.raises(DatapipeError) as err:
        list(datapipe.Loader(url, batch_size=2, num_workers=0, shuffle=False, verify=True))
    assert isinstance(err.value, ShardCorruptError) and shards[1] in str(err.value)
    assert sorted(os.listdir(tmp)) == before  # nothing written


def test_a_missing_or_foreign_index_is_caught(dataset):
    url, shards, tmp = dataset
    # shard 1 now has shard 0's index; shard 0 has none
    os.replace(shards[0] + ".idx", shards[1] + ".idx")
    with pytest.raises(DatapipeError, match=r"shard-000000.*missing"):
        datapipe.Loader(url, num_workers=0)
    with pytest.raises(ShardCorruptError, match="shard-000001"):
        with open_shard(shards[1], index=True) as reader:
            list(reader)


def test_a_huge_size_field_allocates_nothing_like_it(tmp_path):
    from datapipe.formats.tar.headers import member_header

    header = bytearray(member_header("k.bin", 4))
    header[124:136] = b"\x80" + (2**63 - 1).to_bytes(11, "big")
    header[148:156] = b"        "
    header[148:156] = b"%06o\x00 " % sum(header)
    path = tmp_path / "huge.tar"
    path.write_bytes(bytes(header) + bytes(512 + 1024))
    tracemalloc.start()
    with pytest.raises(ShardCorruptError, match=str(path)), open_shard(path) as reader:
        list(reader)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20
