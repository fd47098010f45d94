"""The shard cache on its own: verified downloads, sharing between processes, eviction, crash
cleanup."""

import fcntl
import hashlib
import multiprocessing
import os
import uuid

import fsspec
import fsspec.implementations.local
import pytest

from datapipe.errors import NotFoundError, ShardCorruptError
from datapipe.storage.cache import ShardCache


@pytest.fixture
def remote():
    fs = fsspec.filesystem("memory")
    root = f"/cache-test-{uuid.uuid4().hex}"
    files = {}
    for i in range(6):
        data = os.urandom(1000 + i)
        fs.pipe(f"{root}/shard-{i}.tar", data)
        files[i] = (f"{root}/shard-{i}.tar", hashlib.sha256(data).hexdigest(), len(data))
    return fs, files


def test_download_once_verified_then_served_from_disk(tmp_path, remote):
    fs, files = remote
    cache = ShardCache(tmp_path)
    path, sha, size = files[0]
    with cache.open(fs, path, sha, size) as cached:
        assert cached.path.read_bytes() == fs.cat(path)
    fs.rm(path)  # gone from the remote: the cached copy still serves
    with cache.open(fs, path, sha, size) as cached:
        assert cached.path.stat().st_size == size


def test_a_changed_object_is_refused_and_leaves_nothing(tmp_path, remote):
    fs, files = remote
    path, sha, size = files[1]
    fs.pipe(path, b"x" * size)
    with pytest.raises(ShardCorruptError, match="sha256 does not match the manifest"):
        ShardCache(tmp_path).open(fs, path, sha, size)
    assert not [p for p in tmp_path.iterdir() if not p.name.endswith(".lock")]


@pytest.mark.parametrize("change", ["shorter", "longer"])
def test_an_object_of_another_size_than_the_manifests_is_refused(tmp_path, remote, change):
    fs, files = remote
    path, sha, size = files[3]
    data = fs.cat(path)
    # its last byte lost, or one more appended
    fs.pipe(path, data[:-1] if change == "shorter" else data + b"!")
    with pytest.raises(ShardCorruptError, match="sha256 does not match the manifest"):
        ShardCache(tmp_path).open(fs, path, sha, size)
    assert not [p for p in tmp_path.iterdir() if not p.name.endswith(".lock")]


def test_a_missing_object_is_a_clear_error(tmp_path, remote):
    fs, _ = remote
    with pytest.raises(NotFoundError, match="no such object"):
        ShardCache(tmp_path).open(fs, "/nowhere/shard-9.tar", "0" * 64, 10)


def test_eviction_keeps_the_limit_spares_open_entries_and_foreign_files(tmp_path, remote):
    fs, files = remote
    (tmp_path / "notes.txt").write_text("mine, not the cache's")
    cache = ShardCache(tmp_path, limit=2500)
    held = cache.open(fs, *files[0])
    for i in range(1, 6):
        cache.open(fs, *files[i]).close()
        assert cache.size() <= 2500 or held.path.exists()
    assert held.path.exists()  # in use: never evicted
    assert cache.size() <= 2500 + files[0][2]
    held.close()
    cache.evict()
    assert cache.size() <= 2500 and (tmp_path / "notes.txt").exists()


def _hold_exclusive(lock_path, ready, release):
    with open(lock_path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        ready.set()
        release.wait(30)


def test_crashed_download_leftovers_are_cleaned_but_live_ones_are_not(tmp_path, remote):
    fs, files = remote
    path, sha, size = files[2]
    entry = ShardCache(tmp_path)._entry(path, sha)
    dead = tmp_path / f"{entry}.tmp-otherhost-12345-deadbeef"
    dead.write_bytes(b"half a shard")
    live_entry = ShardCache(tmp_path)._entry(*files[3][:2])
    live = tmp_path / f"{live_entry}.tmp-thishost-1-cafe0123"
    live.write_bytes(b"being written")
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(
        target=_hold_exclusive, args=(tmp_path / f"{live_entry}.lock", ready, release)
    )
    holder.start()
    try:
        assert ready.wait(30)
        ShardCache(tmp_path)  # opening a cache cleans up
        assert not dead.exists() and live.exists()
    finally:
        release.set()
        holder.join(30)
    with ShardCache(tmp_path).open(fs, path, sha, size) as cached:
        assert cached.path.read_bytes() == fs.cat(path)


def test_cleanup_removes_only_its_own_temporary_files(tmp_path, remote):
    fs, files = remote
    entry = ShardCache(tmp_path)._entry(*files[0][:2])
    ours = tmp_path / f"{entry}.tmp-somehost.example-4242-0123abcd"
    foreign = [
        "notes.tmp-1",
        "backup.tar.tmp-old",
        f"{entry}.tmp-by-hand",
        f"{entry}.tmp-host-12-NOTHEX00",
        "0123456789abcdef01234567-x.tar.tmp-host-1-0123abcd.partial",
    ]
    for name in [ours.name, *foreign]:
        (tmp_path / name).write_bytes(b"x")
    ShardCache(tmp_path)
    assert not ours.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp-" in p.name) == sorted(foreign)


def test_eviction_takes_the_least_recently_used_entry(tmp_path, remote):
    fs, files = remote
    pair = files[0][2] + files[1][2] + files[2][2]  # room for three entries, not four
    cache = ShardCache(tmp_path, limit=pair + 10)
    for i in (0, 1, 2):
        cache.open(fs, *files[i]).close()
    cache.open(fs, *files[0]).close()  # 0 used again: 1 is now the least recently used
    cache.open(fs, *files[3]).close()
    names = {e.rsplit("-", 1)[-1] for _, _, e in cache.entries()}
    assert names == {"0.tar", "2.tar", "3.tar"}
    cache.open(fs, *files[4]).close()  # then 2
    assert {e.rsplit("-", 1)[-1] for _, _, e in cache.entries()} == {"0.tar", "3.tar", "4.tar"}
    assert cache.size() <= pair + 10


def test_a_download_makes_room_before_it_lands(tmp_path, remote, monkeypatch):
    fs, files = remote
    cache = ShardCache(tmp_path, limit=files[0][2] + files[1][2])
    cache.open(fs, *files[0]).close()
    cache.open(fs, *files[1]).close()
    sizes = []
    real_replace = os.replace

    # the moment the new entry lands: the old one must be gone already
    def watching_replace(src, dst):
        # under the ledger lock: not size()
        sizes.append(sum(size for _, size, _ in cache._entries()))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", watching_replace)  # a spy: the real rename still runs
    cache.open(fs, *files[2]).close()
    assert sizes and sizes[0] + files[2][2] <= cache.limit
    assert cache.size() <= cache.limit


class CountingFS(fsspec.implementations.local.LocalFileSystem):
    """A 'remote' that records every read (an open, or a copy to a local file) in a log file (shared
    by forked processes)."""

    log_path = None

    def _log(self, path):
        with open(self.log_path, "a") as log:
            log.write(f"{path}\n")

    def _open(self, path, mode="rb", **kw):
        self._log(path)
        return super()._open(path, mode, **kw)

    def get_file(self, path1, path2, *args, **kw):
        self._log(path1)
        return super().get_file(path1, path2, *args, **kw)


def _open_in_child(cache_dir, path, sha, size, start, all_open):
    start.wait(30)
    cached = ShardCache(cache_dir).open(CountingFS(), path, sha, size)
    # every process holds its copy open at once, as DataLoader workers reading it do
    all_open.wait()
    cached.close()


def test_processes_sharing_a_cache_download_each_shard_once_and_never_wait_on_each_other(tmp_path):

    data = os.urandom(8 << 20)
    remote = tmp_path / "remote.tar"
    remote.write_bytes(data)
    CountingFS.log_path = tmp_path / "opens.log"
    ctx = multiprocessing.get_context("fork")
    start, all_open = ctx.Event(), ctx.Barrier(4, timeout=60)
    procs = [
        ctx.Process(
            target=_open_in_child,
            args=(
                tmp_path / "cache",
                str(remote),
                hashlib.sha256(data).hexdigest(),
                len(data),
                start,
                all_open,
            ),
        )
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(90)
        if p.is_alive():  # stuck on a lock: fail, do not hang
            p.terminate()
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert CountingFS.log_path.read_text().splitlines() == [str(remote)]
