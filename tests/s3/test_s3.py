"""Stores on S3 for real: a moto S3 server on 127.0.0.1, builds written from Dask workers, the dataset
commands, the loader through the shared cache (cold and warm, eviction, crash recovery) and retries
through a proxy that fails requests."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faults import FaultProxy

import datapipe
from datapipe.errors import NotFoundError
from datapipe.storage.cache import ShardCache

REPO = Path(__file__).parents[2]
SECRET = "testing-secret-do-not-print"
pytestmark = pytest.mark.s3


def cli(env, *args, cwd=None):
    out = subprocess.run([sys.executable, "-m", "datapipe", *args], capture_output=True, text=True, env=env, cwd=cwd)
    assert SECRET not in out.stdout + out.stderr
    return out


@pytest.fixture(scope="module")
def digits_on_s3(s3, tmp_path_factory):
    """The digits example built by the CLI straight into s3://BUCKET/store from 2 Dask workers (once per module;
    tests that damage it work on a copy)."""
    tmp_path = tmp_path_factory.mktemp("digits")
    for name in ("digits.yaml", "digits_code.py"):
        shutil.copy(REPO / "pipelines" / name, tmp_path / name)
    subprocess.run([sys.executable, str(REPO / "pipelines" / "prepare_digits.py"), "--out", str(tmp_path / "raw")],
                   check=True, capture_output=True)
    store = f"s3://{s3['bucket']}/store"
    out = cli(s3["env"], "build", "digits.yaml", "--out", store, "--workers", "2", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return {**s3, "store": store, "url": f"{store}/digits", "summary": json.loads(out.stdout.splitlines()[-1]),
            "dir": tmp_path}


def test_build_to_s3_and_every_dataset_command_there(digits_on_s3):
    env, store, url = digits_on_s3["env"], digits_on_s3["store"], digits_on_s3["url"]
    assert digits_on_s3["summary"]["samples"] == 1773
    listed = json.loads(cli(env, "ls", store, "--json").stdout)
    assert [(r["dataset"], r["tags"]) for r in listed] == [("digits", ["latest"])]
    assert cli(env, "verify", url).returncode == 0
    assert json.loads(cli(env, "info", url, "--json").stdout)["samples"] == 1773
    assert cli(env, "tag", url, "v1").returncode == 0
    diff = json.loads(cli(env, "diff", f"{url}@v1", url, "--json").stdout)
    assert diff["changed"] == diff["added"] == diff["removed"] == []
    assert cli(env, "gc", store + "/digits").returncode == 0
    # explicit storage options work too, and credentials never reach the store
    explicit = {k: v for k, v in env.items() if k != "AWS_ENDPOINT_URL_S3"}
    out = cli(explicit, "-o", f"endpoint_url={digits_on_s3['endpoint']}", "verify", url)
    assert out.returncode == 0, out.stderr
    import s3fs

    fs = s3fs.S3FileSystem()
    for path in fs.find(f"{digits_on_s3['bucket']}/store"):
        assert SECRET.encode() not in fs.cat(path)


def test_loader_reads_through_the_cache_with_two_workers_cold_and_warm(digits_on_s3, tmp_path):
    cache = tmp_path / "cache"

    def epoch():
        loader = datapipe.Loader(digits_on_s3["url"], batch_size=64, num_workers=2, seed=3, cache_dir=cache)
        return [(b["__key__"], b["cls"].tolist()) for b in loader]

    cold = epoch()
    assert len([p for p in cache.iterdir() if p.name.endswith(".tar")]) == digits_on_s3["summary"]["shards"]
    warm = epoch()
    assert cold == warm and len(cold) == 1773 // 64
    local = tmp_path / "local"
    subprocess.run([sys.executable, "-m", "datapipe", "build", "digits.yaml", "--out", str(local), "--workers", "1"],
                   check=True, capture_output=True, cwd=digits_on_s3["dir"])
    same = datapipe.Loader(f"{local}/digits", batch_size=64, num_workers=0, seed=3)
    assert [(b["__key__"], b["cls"].tolist()) for b in same] == cold


def test_cache_stays_under_its_limit_while_an_epoch_streams(digits_on_s3, tmp_path):
    limit = 400_000  # about three shards and their indexes
    loader = datapipe.Loader(digits_on_s3["url"], batch_size=32, num_workers=0, cache_dir=tmp_path / "c",
                             cache_limit=limit, download_ahead=1)
    keys = [k for b in loader for k in b["__key__"]]
    assert len(set(keys)) == len(keys) == 1773 // 32 * 32
    loader.dataset.close()
    cache = ShardCache(tmp_path / "c", limit)
    cache.evict()
    assert cache.size() <= limit


def test_missing_objects_fail_at_once_naming_bucket_and_key(digits_on_s3, tmp_path):
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.copy(f"{digits_on_s3['bucket']}/store/digits", f"{digits_on_s3['bucket']}/damaged/digits", recursive=True)
    version = digits_on_s3["summary"]["version"]
    shard = f"{digits_on_s3['bucket']}/damaged/digits/versions/{version}/shard-000003.tar"
    fs.rm(shard)
    with pytest.raises(NotFoundError, match=r"shard-000003\.tar: missing"):
        datapipe.Loader(f"s3://{digits_on_s3['bucket']}/damaged/digits", num_workers=0, cache_dir=tmp_path)
    start = time.monotonic()
    bucket = digits_on_s3["bucket"]
    with pytest.raises(NotFoundError, match=rf"no such object \(bucket '{bucket}', key '.*shard-000003"):
        ShardCache(tmp_path).open(fs, shard, "0" * 64, 10)
    assert time.monotonic() - start < 5  # permanent: no backoff


def test_transient_failures_are_retried_until_the_epoch_is_complete(digits_on_s3, tmp_path):
    proxy = FaultProxy(digits_on_s3["endpoint"])
    try:
        options = {"endpoint_url": proxy.url, "config_kwargs": {"retries": {"max_attempts": 1}}}
        loader = datapipe.Loader(digits_on_s3["url"], batch_size=64, num_workers=0, seed=1, cache_dir=tmp_path,
                                 storage_options=options)
        proxy.fail_rate = 0.3  # from here on, three requests in ten get a 503
        keys = [k for b in loader for k in b["__key__"]]
        assert len(set(keys)) == len(keys) == 1773 // 64 * 64
        assert proxy.failed > 0
    finally:
        proxy.close()


CRASHING_DOWNLOAD = """
import sys, s3fs
from datapipe.storage.cache import ShardCache
fs = s3fs.S3FileSystem(endpoint_url=sys.argv[2])
ShardCache(sys.argv[1]).open(fs, sys.argv[3], sys.argv[4], int(sys.argv[5]))
"""


def test_a_download_killed_midway_leaves_nothing_a_restart_trips_over(s3, tmp_path):
    import s3fs

    data = os.urandom(6 << 20)
    key = f"{s3['bucket']}/big/shard-000000.tar"
    s3fs.S3FileSystem().pipe(key, data)
    sha = hashlib.sha256(data).hexdigest()
    proxy = FaultProxy(s3["endpoint"], delay_per_chunk=0.02)  # about 2 s for the whole object
    cache_dir = tmp_path / "cache"
    try:
        proc = subprocess.Popen([sys.executable, "-c", CRASHING_DOWNLOAD, str(cache_dir), proxy.url, key, sha,
                                 str(len(data))], env=s3["env"])
        deadline = time.monotonic() + 60
        while not list(cache_dir.glob("*.tmp-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proxy.close()
    leftovers = list(cache_dir.glob("*.tmp-*"))
    assert leftovers and leftovers[0].stat().st_size < len(data)  # killed before the rename
    cache = ShardCache(cache_dir)  # a restart: cleans what the dead download left
    assert not list(cache_dir.glob("*.tmp-*"))
    with cache.open(s3fs.S3FileSystem(), key, sha, len(data)) as cached:
        assert hashlib.sha256(cached.path.read_bytes()).hexdigest() == sha


def test_concurrent_builders_into_one_s3_store_leave_only_complete_versions(digits_on_s3):
    env, store, work = digits_on_s3["env"], digits_on_s3["store"], digits_on_s3["dir"]
    shutil.copy(REPO / "pipelines" / "digits_tfrecord.yaml", work / "digits_tfrecord.yaml")
    procs = [subprocess.Popen([sys.executable, "-m", "datapipe", "build", name, "--out", store, "--workers", "1",
                               "--json"], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in ("digits_tfrecord.yaml", "digits.yaml")]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in results]
    versions = [json.loads(out.splitlines()[-1])["version"] for out, _ in results]
    assert versions[1] == digits_on_s3["summary"]["version"]  # the same inputs: the same version, only the ref moved
    for name in ("digits-tfrecord", "digits"):
        assert cli(env, "verify", f"{store}/{name}").returncode == 0
