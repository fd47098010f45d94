"""Stores on S3 for real: a moto S3 server on 127.0.0.1, builds written from Dask workers, the
dataset commands, the loader through the shared cache (cold and warm, eviction, crash recovery) and
retries through a proxy that fails requests."""

import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from faults import FaultProxy
from helpers.cli import datapipe_in_process

import datapipe
from datapipe.builder.config import load_pipeline
from datapipe.builder.result import PartitionCounts
from datapipe.builder.run import Execution, build
from datapipe.errors import DatapipeError, NotFoundError
from datapipe.storage.cache import ShardCache
from datapipe.versioning.store import Store
from datapipe.versioning.verify import verify_version

REPO = Path(__file__).parents[2]
SECRET = "testing-secret-do-not-print"
pytestmark = pytest.mark.s3


def cli(env, *args, cwd=None):
    out = datapipe_in_process(*args, env=env, cwd=cwd)
    assert SECRET not in out.stdout + out.stderr
    return out


@pytest.fixture(scope="module")
def digits_on_s3(s3, tmp_path_factory, copy_digits):
    """The digits example built by the CLI straight into s3://BUCKET/store from 2 Dask workers (once
    per module; tests that damage it work on a copy). The credentials are given as -o key=... -o
    secret=..., not in the environment: the secret must reach neither the output (with -v) nor any
    stored object."""
    tmp_path = copy_digits(tmp_path_factory.mktemp("digits"), "digits.yaml", "digits_code.py")
    # without its splits section: these tests read the whole version in storage order, over shards
    # of 21-41 samples numbered shard-000000 on (splits are tested in tests/builder and
    # tests/loader)
    pipeline = tmp_path / "digits.yaml"
    pipeline.write_text(
        re.sub(r"^splits:.*\n(?:  .*\n)*", "", pipeline.read_text(), flags=re.MULTILINE)
    )
    assert "splits" not in pipeline.read_text()
    store = f"s3://{s3['bucket']}/store"
    env = {
        k: v
        for k, v in s3["env"].items()
        if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    }
    out = cli(
        env,
        "-v",
        "-o",
        f"key={s3['env']['AWS_ACCESS_KEY_ID']}",
        "-o",
        f"secret={SECRET}",
        "build",
        "digits.yaml",
        "--out",
        store,
        "--workers",
        "2",
        "--json",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    return {
        **s3,
        "store": store,
        "url": f"{store}/digits",
        "summary": json.loads(out.stdout.splitlines()[-1]),
        "dir": tmp_path,
    }


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
    stored = fs.find(f"{digits_on_s3['bucket']}/store")
    assert len(stored) > 2 * digits_on_s3["summary"]["shards"]
    for path in stored:
        assert SECRET.encode() not in fs.cat(path)
    wrong = cli(
        explicit,
        "-v",
        "-o",
        "key=someone",
        "-o",
        f"secret={SECRET}",
        "-o",
        # errors keep it unsaid too
        f"endpoint_url={digits_on_s3['endpoint']}",
        "info",
        f"{store}/nothing",
    )
    assert (
        wrong.returncode == 3
        and "Traceback" not in wrong.stderr
        and wrong.stderr.startswith("error: ")
    )


def test_loader_reads_through_the_cache_with_two_workers_cold_and_warm(
    digits_on_s3, tmp_path, in_process
):
    """Two DataLoader worker processes (and their download-ahead threads) share one cache: every
    shard and index is fetched from S3 once (GETs counted at a proxy), the warm epoch fetches
    nothing."""
    cache = tmp_path / "cache"
    proxy = FaultProxy(digits_on_s3["endpoint"])

    def epoch():
        loader = datapipe.Loader(
            digits_on_s3["url"],
            batch_size=64,
            num_workers=2,
            seed=3,
            cache_dir=cache,
            storage_options={"endpoint_url": proxy.url},
        )
        return [(b["__key__"], b["cls"].tolist()) for b in loader]

    try:
        cold = epoch()
        shard_gets = {path: n for path, n in proxy.gets.items() if "/shard-" in path}
        # each file in GETs alone: no HEAD before a download
        assert [
            (method, path)
            for method, path, *_ in proxy.log
            if "/shard-" in path and method != "GET"
        ] == []
        warm = epoch()
        # nothing new
        assert {path: n for path, n in proxy.gets.items() if "/shard-" in path} == shard_gets
    finally:
        proxy.close()
    shards = digits_on_s3["summary"]["shards"]
    # each shard and index once
    assert len(shard_gets) == 2 * shards and set(shard_gets.values()) == {1}
    assert len([p for p in cache.iterdir() if p.name.endswith(".tar")]) == shards
    assert cold == warm and len(cold) == 1773 // 64
    # the same pipeline (the S3 copy has no splits section, unlike the session's digits) built into
    # a local store
    local = tmp_path / "local"
    build(
        load_pipeline(digits_on_s3["dir"] / "digits.yaml"),
        Store(str(local)),
        execution=Execution(client=in_process),
    )
    same = datapipe.Loader(f"{local}/digits", batch_size=64, num_workers=0, seed=3)
    assert [(b["__key__"], b["cls"].tolist()) for b in same] == cold


def _cached_shards(cache: ShardCache) -> list[int]:
    return sorted(
        int(e.rsplit("shard-", 1)[1][:6]) for _, _, e in cache.entries() if e.endswith(".tar")
    )


def test_cache_evicts_least_recently_used_shards_while_an_epoch_streams(digits_on_s3, tmp_path):
    """Storage order, batches of 32 from shards of 21 to 41 samples (cut by content, at least half
    full): a batch reads at most three shards, so a limit of four shards (with indexes) holds
    everything in use.
    After every batch the cache is under the limit, and what it holds is the newest stretch of
    shards: the oldest went first. No download ahead here: its thread may open (and so refresh) a
    shard while the consumer does, which makes the order of use times a race under load (the full
    suite once saw [0, 3, 4]); tests of download_ahead check the bound with it."""
    shards = datapipe.open_dataset(
        digits_on_s3["url"], cache_dir=tmp_path / "unused"
    ).manifest.shards
    entry = max(s.bytes + s.index_bytes for s in shards)
    limit = 4 * entry
    loader = datapipe.Loader(
        digits_on_s3["url"],
        batch_size=32,
        shuffle=False,
        num_workers=0,
        prefetch=0,
        cache_dir=tmp_path / "c",
        cache_limit=limit,
        download_ahead=0,
    )
    cache = ShardCache(tmp_path / "c")
    keys, held, seen = [], [], set()
    for batch in loader:
        keys.extend(batch["__key__"])
        assert cache.size() <= limit
        cached = _cached_shards(cache)
        # a window under the byte limit: LRU went
        assert cached == list(range(cached[0], cached[-1] + 1))
        assert set(loader.dataset.held()) <= set(cached)  # what the reader holds is never evicted
        held.append(len(loader.dataset.held()))
        seen.update(cached)
    assert len(set(keys)) == len(keys) == 1773 // 32 * 32
    # every shard read passed through (the last may hold only samples drop_last drops); shard 0 left
    # long ago
    assert (
        set(range(len(shards) - 1)) <= seen <= set(range(len(shards)))
        and _cached_shards(cache)[0] > 0
    )
    # released as soon as read, all of them at the end
    assert max(held) <= 3 and loader.dataset.held() == []


def test_a_mix_of_remote_sources_gives_each_shard_back_after_its_last_read(digits_on_s3, tmp_path):
    """Two sources read through one bounded cache, interleaved 1:1 in storage order: each holds at
    most the two shards a batch spans, and every shard goes back as soon as its source has passed
    it."""
    shards = datapipe.open_dataset(
        digits_on_s3["url"], cache_dir=tmp_path / "unused"
    ).manifest.shards
    limit = 6 * max(s.bytes + s.index_bytes for s in shards)
    mixed = datapipe.mix(
        {"a": digits_on_s3["url"], "b": f"{digits_on_s3['url']}@latest"},
        {"a": 1, "b": 1},
        cache_dir=tmp_path / "c",
        cache_limit=limit,
    )
    loader = datapipe.Loader(
        mixed, batch_size=32, shuffle=False, num_workers=0, prefetch=0, download_ahead=0
    )
    cache = ShardCache(tmp_path / "c")
    keys, held = {"a": [], "b": []}, []
    for batch in loader:
        for source, key in zip(batch["__source__"], batch["__key__"], strict=True):
            keys[source].append(key)
        assert cache.size() <= limit
        held.append(len(loader.dataset.held()))
    assert keys["a"] == keys["b"] and len(set(keys["a"])) == len(keys["a"]) == 2 * 1773 // 32 * 16
    assert max(held) <= 4 and loader.dataset.held() == []


def test_a_limit_below_the_shards_in_use_holds_just_those(digits_on_s3, tmp_path):
    """Shuffled: a consumer reads the 4 shards of a block at once (8 across a block boundary). With
    a limit smaller than that, the cache holds only the shards in use and the one downloaded ahead
    (documented)."""
    shards = datapipe.open_dataset(
        digits_on_s3["url"], cache_dir=tmp_path / "unused"
    ).manifest.shards
    entry = max(s.bytes + s.index_bytes for s in shards)
    loader = datapipe.Loader(
        digits_on_s3["url"],
        batch_size=32,
        num_workers=0,
        prefetch=0,
        seed=5,
        cache_dir=tmp_path / "c",
        cache_limit=entry,
        download_ahead=1,
    )
    cache = ShardCache(tmp_path / "c")
    count = 0
    for batch in loader:
        count += len(batch["__key__"])
        assert cache.size() <= (len(loader.dataset.held()) + 1) * entry
    assert count == 1773 // 32 * 32 and cache.size() <= entry


def test_two_workers_share_a_bounded_cache(digits_on_s3, tmp_path):
    """Two DataLoader worker processes evicting from one small cache while both read: the same
    batches as an unbounded epoch, and the cache back under its limit once they are done (no lock
    left behind)."""
    shards = datapipe.open_dataset(
        digits_on_s3["url"], cache_dir=tmp_path / "unused"
    ).manifest.shards
    limit = 4 * max(s.bytes + s.index_bytes for s in shards)

    def epoch(**kw):
        loader = datapipe.Loader(digits_on_s3["url"], batch_size=64, num_workers=2, seed=9, **kw)
        return [(b["__key__"], b["cls"].tolist()) for b in loader]

    bounded = epoch(cache_dir=tmp_path / "small", cache_limit=limit)
    assert bounded == epoch(cache_dir=tmp_path / "big") and len(bounded) == 1773 // 64
    cache = ShardCache(tmp_path / "small", limit)
    assert cache.size() <= limit
    assert len(cache.entries()) < 2 * (len(shards) - 1)  # evicted on the way


def test_download_ahead_fetches_the_next_shards_and_no_more(digits_on_s3, tmp_path):
    ahead = 3
    loader = datapipe.Loader(
        digits_on_s3["url"],
        batch_size=16,
        shuffle=False,
        num_workers=0,
        prefetch=0,
        cache_dir=tmp_path,
        download_ahead=ahead,
    )
    cache = ShardCache(tmp_path)
    batches = iter(loader)
    first = next(batches)  # shard 0, samples 0-15
    assert len(first["__key__"]) == 16 and loader.dataset.held() == [0]
    deadline = time.monotonic() + 60
    while _cached_shards(cache) != list(range(ahead + 1)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _cached_shards(cache) == list(range(ahead + 1))  # the one in use and the next three
    time.sleep(0.5)
    # and it waits for the reader before the fifth
    assert _cached_shards(cache) == list(range(ahead + 1))
    next(batches), next(batches), next(batches)  # samples 48-63: shard 1 opened, shard 0 released
    deadline = time.monotonic() + 60
    while _cached_shards(cache)[-1] != ahead + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _cached_shards(cache) == list(range(ahead + 2))
    batches.close()


def test_missing_objects_fail_at_once_naming_bucket_and_key(digits_on_s3, tmp_path):
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.copy(
        f"{digits_on_s3['bucket']}/store/digits",
        f"{digits_on_s3['bucket']}/damaged/digits",
        recursive=True,
    )
    version = digits_on_s3["summary"]["version"]
    shard = f"{digits_on_s3['bucket']}/damaged/digits/versions/{version}/shard-000003.tar"
    fs.rm(shard)
    with pytest.raises(NotFoundError, match=r"shard-000003\.tar: missing"):
        datapipe.Loader(
            f"s3://{digits_on_s3['bucket']}/damaged/digits", num_workers=0, cache_dir=tmp_path
        )
    start = time.monotonic()
    bucket = digits_on_s3["bucket"]
    with pytest.raises(
        NotFoundError, match=rf"no such object \(bucket '{bucket}', key '.*shard-000003"
    ):
        ShardCache(tmp_path).open(fs, shard, "0" * 64, 10)
    assert time.monotonic() - start < 5  # permanent: no backoff


def test_transient_failures_are_retried_by_datapipe_until_the_epoch_is_complete(
    digits_on_s3, tmp_path, caplog, monkeypatch, quick_backoff
):
    """The proxy fails 3 GETs in 10 (ref and manifest reads and listings included) with a 503 that
    neither s3fs nor botocore (total_max_attempts=1) tries again: every failure reaches datapipe,
    which retries it.
    With DATAPIPE_RETRIES=1 the same faults end the epoch with an error naming bucket, key and
    cause."""
    proxy = FaultProxy(digits_on_s3["endpoint"], fail_rate=0.3, seed=4)
    options = {"endpoint_url": proxy.url, "config_kwargs": {"retries": {"total_max_attempts": 1}}}
    caplog.set_level(logging.WARNING, logger="datapipe.storage.retry")
    monkeypatch.setenv("DATAPIPE_RETRIES", "12")  # 12 failures in a row: 0.3**12, never
    try:
        # each loader closed while the proxy and the server run (one left open releases its lease at
        # exit, to neither)
        with datapipe.Loader(
            digits_on_s3["url"],
            batch_size=64,
            num_workers=0,
            seed=1,
            cache_dir=tmp_path / "a",
            storage_options=options,
        ) as loader:
            keys = [k for b in loader for k in b["__key__"]]
        assert len(set(keys)) == len(keys) == 1773 // 64 * 64
        # each failed request was retried by datapipe, once: the same objects, as many times
        failed = Counter(path for method, path, status, *_ in proxy.log if status == 503)
        retried = Counter("/" + r.args[0].removeprefix("s3://") for r in caplog.records)
        assert proxy.failed > 10 and retried == failed
        # store reads too
        assert any(path.endswith(("/manifest.json", "/refs/latest")) for path in retried)

        monkeypatch.setenv("DATAPIPE_RETRIES", "1")
        caplog.clear()
        with pytest.raises(
            DatapipeError,
            match=rf"failed \(bucket '{digits_on_s3['bucket']}', key '.*'\): .*"
            r"ServiceUnavailable",
        ):
            with datapipe.Loader(
                digits_on_s3["url"],
                batch_size=64,
                num_workers=0,
                seed=1,
                cache_dir=tmp_path / "b",
                storage_options=options,
            ) as loader:
                list(loader)
        # no retries (the lease's release on the way out may warn that it failed: the proxy still
        # fails requests)
        assert not [r for r in caplog.records if r.name == "datapipe.storage.retry"]
        # the argument wins over the environment, for the store's reads and the cache's downloads
        # alike
        with datapipe.open_dataset(
            digits_on_s3["url"], options, cache_dir=tmp_path / "c", retries=12
        ) as ds:
            assert ds.store.retry.attempts == ds.cache.retry.attempts == 12
            assert len(datapipe.Loader(ds, batch_size=64, num_workers=0)) == 1773 // 64
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
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CRASHING_DOWNLOAD,
                str(cache_dir),
                proxy.url,
                key,
                sha,
                str(len(data)),
            ],
            env=s3["env"],
        )
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
    # two processes, each building on threads (the digits are small): what races is the commit to S3
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "datapipe", "build", name, "--out", store, "--json"],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("digits_tfrecord.yaml", "digits.yaml")
    ]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in results]
    versions = [json.loads(out.splitlines()[-1])["version"] for out, _ in results]
    # the same inputs: the same version, only the ref moved
    assert versions[1] == digits_on_s3["summary"]["version"]
    for name in ("digits-tfrecord", "digits"):
        assert cli(env, "verify", f"{store}/{name}").returncode == 0


def test_an_incremental_build_on_s3_shares_the_parents_shards(s3, tmp_path):
    (tmp_path / "raw").mkdir()
    pipeline = tmp_path / "rows.yaml"
    pipeline.write_text(
        "name: rows\nsource: {path: raw/*.csv, format: csv}\n"
        "sample: {key: id, fields: {txt: text}}\nshards: {max_bytes: 8KB}\n"
    )

    def write(n: int) -> None:
        rows = "".join(f"f{n}r{i:03d},{'y' * (30 + i % 50)}\n" for i in range(40))
        (tmp_path / "raw" / f"f{n}.csv").write_text("id,text\n" + rows)

    for n in (0, 2, 4):
        write(n)
    store = Store(f"s3://{s3['bucket']}/incremental")
    first = build(load_pipeline(pipeline), store)
    write(1)
    again = build(load_pipeline(pipeline), store)
    scratch = build(load_pipeline(pipeline), Store(f"s3://{s3['bucket']}/scratch"))
    assert again.manifest.version == scratch.manifest.version
    assert (
        again.incremental.partitions == PartitionCounts(measured=1, reused=3)
        and again.incremental.shards.reused
    )
    shared = [s for s in again.manifest.shards if s.stored_in]
    # renumbered
    assert len(shared) == again.incremental.shards.reused and any(s.stored_as for s in shared)
    assert not verify_version(store, "rows", again.manifest, again.manifest.version)
    from datapipe.versioning.history import usage

    assert (
        usage(store, "rows")["stored_bytes"]
        == first.manifest.bytes + again.incremental.shards.bytes_written
    )
    keys = {
        k
        for b in datapipe.Loader(again.url, batch_size=10, shuffle=False, drop_last="pad")
        for k in b["__key__"]
    }
    assert keys == {f"f{n}r{i:03d}" for n in (0, 1, 2, 4) for i in range(40)}


def test_check_on_a_cluster_rebuilds_into_a_scratch_prefix_of_the_s3_store(
    digits_on_s3, dask_client
):
    from helpers.cli import on_session_cluster

    env = digits_on_s3["env"]
    options = [
        "-o",
        f"key={env['AWS_ACCESS_KEY_ID']}",
        "-o",
        f"secret={env['AWS_SECRET_ACCESS_KEY']}",
        # the cluster's workers get them with the store
        "-o",
        f"endpoint_url={digits_on_s3['endpoint']}",
    ]
    out = datapipe_in_process(
        *options,
        "check",
        "digits.yaml",
        digits_on_s3["url"],
        *on_session_cluster(dask_client.scheduler.address),
        env=env,
        cwd=digits_on_s3["dir"],
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        f"rebuilding into {digits_on_s3['store']}/.check-" in out.stderr
        and "reproducible" in out.stdout
    )
    import s3fs

    assert not [
        p for p in s3fs.S3FileSystem().ls(f"{digits_on_s3['bucket']}/store") if "/.check-" in p
    ]


def test_the_browser_serves_a_store_on_s3_reading_sample_ranges(digits_on_s3):
    from starlette.testclient import TestClient

    from datapipe.serve.app import create_app

    with TestClient(create_app(digits_on_s3["store"])) as client:
        assert "digits" in client.get("/").text
        version = client.get("/d/digits/v/latest")
        assert version.status_code == 200 and "datapipe.Loader(" in version.text
        grid = client.get("/d/digits/v/latest/samples")
        assert grid.status_code == 200 and "<img" in grid.text
        thumb = re.search(r'<img[^>]+src="([^"]+)"', grid.text).group(1).replace("&amp;", "&")
        image = client.get(thumb)
        assert image.status_code == 200 and image.headers["content-type"].startswith("image/")


def test_serve_takes_the_store_options_with_o(digits_on_s3):
    """`datapipe serve s3://... -o key=... -o secret=... -o endpoint_url=...` as a user runs it,
    with no credentials nor endpoint in its environment: the options reach the store it browses."""
    import urllib.request

    from helpers.cli import INSTALLED

    env = {k: v for k, v in digits_on_s3["env"].items() if k != "AWS_ENDPOINT_URL_S3"}
    options = [
        "-o",
        f"key={digits_on_s3['env']['AWS_ACCESS_KEY_ID']}",
        "-o",
        f"secret={SECRET}",
        "-o",
        f"endpoint_url={digits_on_s3['endpoint']}",
    ]
    proc = subprocess.Popen(
        [str(INSTALLED), "serve", digits_on_s3["store"], "--port", "0", *options],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert url, line + proc.stderr.read() if proc.poll() is not None else line
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with direct.open(url.group(0) + "d/digits/v/latest/samples", timeout=60) as page:
            text = page.read().decode()
        assert page.status == 200 and "<img" in text and SECRET not in text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert SECRET not in proc.stderr.read()
