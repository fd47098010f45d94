"""The S3 tests' bucket: one per module, on the session's S3 server (the ``s3_server`` fixture,
tests/conftest.py)."""

import gc
import os
import uuid

import pytest
from helpers.s3 import CREDENTIALS


@pytest.fixture(scope="module")
def s3(s3_server):
    """A fresh bucket per test module; credentials and the endpoint in the environment, as on a real
    machine."""
    import boto3

    with pytest.MonkeyPatch.context() as patch:
        for k, v in {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": s3_server}.items():
            patch.setenv(k, v)
        bucket = f"bucket-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=bucket)
        yield {"endpoint": s3_server, "bucket": bucket, "env": dict(os.environ)}


@pytest.fixture(scope="module", autouse=True)
def _frozen_between_tests():
    """What the module froze (below) goes back to the collector when it ends."""
    yield
    gc.unfreeze()
    gc.collect()


@pytest.fixture(autouse=True)
def _unclosed_datasets_release_their_leases_in_their_test(_frozen_between_tests):
    """A dataset nobody closed releases its lease when it is collected (a weakref finalizer).
    Collect at the end of each test, while the server and the environment are those it was opened
    with: left to chance, the release ran during a later test's command, against that test's
    endpoint, and wrote a warning into its stderr."""
    yield
    gc.collect()
    # what is left lives on (torch, Dask, pyarrow: half a million objects): freezing it keeps the
    # next test's collection to what that test made
    gc.freeze()


@pytest.fixture
def quick_backoff(monkeypatch):
    """Retries wait a twentieth of their backoff: tests that fail hundreds of requests on purpose
    test that each is retried, not how long the jittered wait is (tests/storage/test_retry.py tests
    that)."""
    from datapipe.storage.retry import RetryPolicy

    full = RetryPolicy.delay
    monkeypatch.setattr(
        RetryPolicy, "delay", lambda self, attempt, rng: full(self, attempt, rng) / 20
    )
