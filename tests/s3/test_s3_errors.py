"""Permanent S3 errors through the CLI (missing bucket, unreachable endpoint, unknown protocol,
access denied), the commit on S3 (parallel server-side copies, manifest after shards, ref last), and
gc and verify there."""

import datetime
import json
import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from faults import FaultProxy
from helpers.cli import datapipe_in_process

import datapipe
from datapipe.errors import ConfigError, NotFoundError
from datapipe.formats.registry import get_format
from datapipe.storage.fs import put_atomic
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store

REPO = Path(__file__).parents[2]
SECRET = "testing-secret-do-not-print"
pytestmark = pytest.mark.s3


def cli(env, *args, cwd=None):
    out = datapipe_in_process(*args, env=env, cwd=cwd)
    assert SECRET not in out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    return out


def write_tiny(store: Store, name: str = "tiny", shards: int = 6) -> Manifest:
    """A small webdataset version written through the store API (no Dask): 10 samples a shard."""
    writer = store.begin(name)
    fmt = get_format("webdataset")
    entries = [
        writer.write_shard(
            i, [{"__key__": f"s{i:02d}-{j}", "cls": str(j).encode()} for j in range(10)], fmt
        )
        for i in range(shards)
    ]
    return writer.commit(
        Manifest(name=name, shard_format="webdataset", fields={"cls": "int"}, shards=tuple(entries))
    )


@pytest.fixture(scope="module")
def tiny(s3):
    store = f"s3://{s3['bucket']}/store"
    manifest = write_tiny(Store(store))
    return {**s3, "store": store, "url": f"{store}/tiny", "manifest": manifest}


def test_a_missing_bucket_is_an_error_naming_it(tiny):
    for args in (
        ["ls", "s3://no-such-bucket-dp/store"],
        ["gc", "s3://no-such-bucket-dp/store/tiny"],
        ["info", "s3://no-such-bucket-dp/store/tiny"],
    ):
        out = cli(tiny["env"], "-o", "key=testing-key", "-o", f"secret={SECRET}", *args)
        assert out.returncode == 3, (args, out.stdout, out.stderr)
        assert (
            "error: s3://no-such-bucket-dp/store: bucket 'no-such-bucket-dp' does not exist"
            in out.stderr
        )
        assert out.stdout == ""  # not an empty listing, not "0 removed"


def test_an_unreachable_endpoint_is_a_clear_error(tiny):
    # botocore tries a refused connection again with backoff (~8 s here) before the error; one try
    # (the README's setting for botocore's own retries) gives the same error at once
    out = cli(
        tiny["env"],
        "-o",
        "endpoint_url=http://127.0.0.1:1",
        "-o",
        'config_kwargs={"retries": {"total_max_attempts": 1}}',
        "info",
        f"{tiny['url']}",
    )
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: {tiny['url']}/versions: cannot reach the object store")
    assert "http://127.0.0.1:1" in out.stderr and "endpoint_url" in out.stderr


def test_an_unknown_protocol_is_a_config_error_naming_the_url(tiny, tmp_path):
    for args, url in (
        (["ls", "foo://x"], "foo://x"),
        (["info", "s4://x/store/d"], "s4://x/store"),
        (["build", str(REPO / "pipelines" / "digits.yaml"), "--out", "s4://x"], "s4://x"),
    ):
        out = cli(tiny["env"], *args, cwd=tmp_path)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.startswith(
            f"error: {url}: cannot open this store (Protocol not known: "
        ), out.stderr


def test_access_denied_fails_at_once_naming_bucket_and_key(tiny, tmp_path):
    proxy = FaultProxy(tiny["endpoint"])
    try:
        proxy.deny.add("/manifest.json")
        out = cli(tiny["env"], "-o", f"endpoint_url={proxy.url}", "info", tiny["url"])
        assert out.returncode == 2
        version = tiny["manifest"].version
        key = f"store/tiny/versions/{version}/manifest.json"
        assert f"access denied (bucket '{tiny['bucket']}', key '{key}')" in out.stderr
        assert "AccessDenied" in out.stderr or "Forbidden" in out.stderr
        # one try, no retries
        assert [r[2] for r in proxy.log if r[1].endswith("/manifest.json")] == [403]

        # the loader, downloading a shard into its cache: the same, from the training process
        proxy.deny = {"/shard-000002.tar"}
        loader = datapipe.Loader(
            tiny["url"],
            batch_size=10,
            shuffle=False,
            num_workers=0,
            prefetch=0,
            download_ahead=0,
            cache_dir=tmp_path,
            storage_options={"endpoint_url": proxy.url},
        )
        with pytest.raises(
            ConfigError,
            match=rf"access denied \(bucket '{tiny['bucket']}', key '.*shard-000002.tar'",
        ):
            list(loader)
        assert [r[2] for r in proxy.log if r[1].endswith("/shard-000002.tar")] == [403]
    finally:
        proxy.close()


def test_a_wrong_region_fails_at_once_naming_bucket_key_and_what_to_set(tiny, tmp_path):
    proxy = FaultProxy(tiny["endpoint"])
    try:
        proxy.moved.add("/manifest.json")
        out = cli(tiny["env"], "-o", f"endpoint_url={proxy.url}", "info", tiny["url"])
        assert out.returncode == 2, out.stderr
        key = f"store/tiny/versions/{tiny['manifest'].version}/manifest.json"
        assert f"wrong region (bucket '{tiny['bucket']}', key '{key}')" in out.stderr
        assert "region_name" in out.stderr and "Traceback" not in out.stderr
        # botocore's region redirector sends the request once more; datapipe does not retry (6 tries
        # by default)
        assert [r[2] for r in proxy.log if r[1].endswith("/manifest.json")] in ([301], [301, 301])
    finally:
        proxy.close()


def test_commit_copies_shards_in_parallel_on_the_server_then_manifest_then_ref(s3):
    # each copy takes a while: overlapping ones show
    proxy = FaultProxy(s3["endpoint"], copy_delay=0.05)
    try:
        store = Store(f"s3://{s3['bucket']}/commit", {"endpoint_url": proxy.url})
        writer = store.begin("many")
        fmt = get_format("webdataset")
        entries = [
            writer.write_shard(i, [{"__key__": f"k{i}", "cls": b"1"}], fmt) for i in range(12)
        ]
        before = len(proxy.log)
        manifest = writer.commit(
            Manifest(
                name="many", shard_format="webdataset", fields={"cls": "int"}, shards=tuple(entries)
            )
        )
        log = proxy.log[before:]
    finally:
        proxy.close()
    copies = [r for r in log if r[5] is not None]
    final = f"/{s3['bucket']}/commit/many/versions/{manifest.version}/"
    assert sorted(r[1] for r in copies) == sorted(
        final + name for e in entries for name in (e.path, e.index_path)
    )
    # copied on the server from the partial directory
    assert all(".partial-" in r[5] for r in copies)
    # no bytes via us
    assert not [r for r in log if r[0] == "GET" and ".partial-" in r[1] and "/shard-" in r[1]]
    # sizes from one listing, not a HEAD each
    assert not [r for r in log if r[0] == "HEAD" and ".partial-" in r[1]]
    assert proxy.max_copies > 1  # in parallel
    manifest_put = [r for r in log if r[0] == "PUT" and r[1] == final + "manifest.json"]
    ref_put = [r for r in log if r[0] == "PUT" and r[1].endswith("/many/refs/latest")]
    assert len(manifest_put) == len(ref_put) == 1
    # every shard in place before the manifest
    assert max(r[4] for r in copies) <= manifest_put[0][3]
    assert manifest_put[0][4] <= ref_put[0][3]  # the ref last
    assert not Store(f"s3://{s3['bucket']}/commit").fs.find(
        f"{s3['bucket']}/commit/many/versions/.partial-"
    )


def leave_dead_partial(store: Store) -> str:
    """A partial version with one shard whose writer "crashed": its owner file names a process that
    has exited."""
    writer = store.begin("tiny")
    writer.write_shard(0, [{"__key__": "x", "cls": b"1"}], get_format("webdataset"))
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    owner = {
        "host": socket.gethostname(),
        "pid": int(dead.stdout),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    put_atomic(store.fs, f"{writer.partial}/.owner.json", json.dumps(owner).encode())
    return writer.partial


def test_gc_on_s3_removes_a_partial_version_its_dead_writer_left(tiny):
    partial = leave_dead_partial(Store(tiny["store"]))
    out = cli(tiny["env"], "gc", tiny["url"])
    assert out.returncode == 0, out.stderr
    assert f"removed {partial}" in out.stdout
    fresh = Store(tiny["store"])
    assert not fresh.fs.exists(partial) and not fresh.fs.find(partial)
    # the complete version is untouched
    assert cli(tiny["env"], "verify", tiny["url"]).returncode == 0


def test_gc_and_verify_on_s3_retry_every_transient_failure(s3, caplog, monkeypatch, quick_backoff):
    """gc's listings, existence checks and deletes, and verify's listing and reads, through a proxy
    that fails 3 in 10 requests of every method with a 503 that only datapipe retries: each failure
    is retried, gc removes the dead writer's partial and nothing else, and verify finds every
    file."""
    from collections import Counter

    from datapipe.versioning.gc import collect
    from datapipe.versioning.verify import verify_version

    direct = Store(f"s3://{s3['bucket']}/flaky")
    manifest = write_tiny(direct)
    partial = leave_dead_partial(direct)
    proxy = FaultProxy(
        s3["endpoint"], fail_rate=0.3, seed=5, fail_methods=("GET", "HEAD", "DELETE", "POST")
    )
    options = {
        "endpoint_url": proxy.url,
        "config_kwargs": {"retries": {"total_max_attempts": 1}},
        "skip_instance_cache": True,
        "use_listings_cache": False,
    }
    caplog.set_level(logging.WARNING, logger="datapipe.storage.retry")
    monkeypatch.setenv("DATAPIPE_RETRIES", "12")
    try:
        flaky = Store(f"s3://{s3['bucket']}/flaky", options)
        report = collect(flaky, "tiny")
        assert report.removed == [partial]
        assert verify_version(flaky, "tiny", flaky.manifest("tiny", flaky.resolve("tiny"))) == []
        failed = Counter(path for _, path, status, *_ in proxy.log if status == 503)
        retried = Counter("/" + r.args[0].removeprefix("s3://") for r in caplog.records)
        assert proxy.failed >= 5 and retried == failed
        assert {method for method, _, status, *_ in proxy.log if status == 503} >= {"GET", "HEAD"}
    finally:
        proxy.close()
    fresh = Store(f"s3://{s3['bucket']}/flaky", {"skip_instance_cache": True})
    assert not fresh.fs.find(partial) and fresh.resolve("tiny") == manifest.version


def test_verify_on_s3_catches_a_damaged_shard(s3):
    store = Store(f"s3://{s3['bucket']}/damaged")
    manifest = write_tiny(store, "tiny")
    shard = store.path("tiny", "versions", manifest.version, manifest.shards[2].path)
    data = bytearray(store.fs.cat_file(shard))
    data[600] ^= 0xFF  # one flipped bit pattern, same size
    store.fs.pipe_file(shard, bytes(data))
    out = cli(s3["env"], "verify", f"s3://{s3['bucket']}/damaged/tiny")
    assert out.returncode == 1
    assert f"mismatch: {shard} (sha256 differs)" in out.stdout
    assert "1 problem(s)" in out.stderr


def test_building_into_a_missing_bucket_fails_instead_of_creating_it(s3):
    store = Store("s3://no-such-bucket-dp/store")
    with pytest.raises(NotFoundError, match="bucket 'no-such-bucket-dp' does not exist"):
        store.begin("tiny")
    assert not store.fs.exists("no-such-bucket-dp")
