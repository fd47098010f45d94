"""Retries: transient errors back off and try again; permanent ones fail at once."""

import errno
import random

import pytest

from datapipe.errors import ConfigError, DatapipeError, NotFoundError
from datapipe.storage.retry import (
    RetryPolicy,
    is_transient,
    remote_call,
    remote_error,
    with_retries,
)


class BotoLike(OSError):
    def __init__(self, status: int, code: str) -> None:
        super().__init__(f"{code} ({status})")
        self.response = {"ResponseMetadata": {"HTTPStatusCode": status}, "Error": {"Code": code}}


def wrapped(cause: BaseException) -> OSError:
    try:
        raise OSError(errno.EIO, "s3fs said so") from cause
    except OSError as e:
        return e


@pytest.mark.parametrize(
    "error, transient",
    [
        (ConnectionResetError(), True),
        (TimeoutError(), True),
        (OSError(errno.ETIMEDOUT, "timed out"), True),
        (wrapped(BotoLike(503, "SlowDown")), True),
        (wrapped(BotoLike(500, "InternalError")), True),
        (wrapped(BotoLike(429, "Throttling")), True),
        (FileNotFoundError("no such key"), False),
        (PermissionError("access denied"), False),
        (wrapped(BotoLike(403, "AccessDenied")), False),
        (wrapped(BotoLike(301, "PermanentRedirect")), False),  # wrong region
        (ValueError("bad"), False),
    ],
)
def test_transient_or_permanent(error, transient):
    assert is_transient(error) is transient


def test_transient_errors_are_retried_with_growing_jittered_waits():
    calls, waits = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 4:
            raise ConnectionResetError("reset by peer")
        return "ok"

    policy = RetryPolicy(attempts=6, base_delay=0.1, max_delay=0.3)
    assert with_retries(flaky, "get x", policy, sleep=waits.append, rng=random.Random(1)) == "ok"
    assert len(calls) == 4 and len(waits) == 3
    assert all(0 <= w <= min(0.3, 0.1 * 2**i) for i, w in enumerate(waits))


def test_permanent_errors_and_exhausted_retries_raise():
    calls = []

    def missing():
        calls.append(1)
        raise FileNotFoundError("bucket/key")

    with pytest.raises(FileNotFoundError):
        with_retries(missing, "get", RetryPolicy(attempts=5), sleep=lambda s: None)
    assert len(calls) == 1

    def always_down():
        calls.append(1)
        raise TimeoutError("read timeout")

    with pytest.raises(TimeoutError):
        with_retries(
            always_down, "get", RetryPolicy(attempts=3, base_delay=0), sleep=lambda s: None
        )
    assert len(calls) == 4


def test_the_number_of_tries_comes_from_the_argument_then_the_environment():
    assert RetryPolicy.from_env({}).attempts == 6
    assert RetryPolicy.from_env({"DATAPIPE_RETRIES": "2"}).attempts == 2
    assert RetryPolicy.from_env({"DATAPIPE_RETRIES": "2"}, attempts=9).attempts == 9
    for bad in ({"DATAPIPE_RETRIES": "many"}, {"DATAPIPE_RETRIES": "0"}):
        with pytest.raises(ConfigError, match="DATAPIPE_RETRIES|at least 1"):
            RetryPolicy.from_env(bad)


def test_an_unreachable_endpoint_is_not_retried_again_and_is_named():
    refused = wrapped(ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"))
    assert not is_transient(refused)
    error = remote_error(refused, "s3://b/store/x", "b/store/x")
    assert isinstance(error, ConfigError) and "cannot reach the object store" in str(error)


@pytest.mark.parametrize(
    "cause, kind, words",
    [
        (BotoLike(403, "AccessDenied"), ConfigError, "access denied (bucket 'b', key 'k/x')"),
        (BotoLike(301, "PermanentRedirect"), ConfigError, "wrong region (bucket 'b', key 'k/x')"),
        (BotoLike(404, "NoSuchBucket"), NotFoundError, "no bucket 'b'"),
        (
            BotoLike(503, "SlowDown"),
            DatapipeError,
            "failed after 4 tries (bucket 'b', key 'k/x'): [Errno 5] s3fs said so: SlowDown (503)",
        ),
    ],
)
def test_permanent_failures_name_bucket_key_and_cause(cause, kind, words):
    error = remote_error(wrapped(cause), "s3://b/k/x", "b/k/x", attempts=4)
    assert type(error) is kind and str(error).startswith("s3://b/k/x: ") and words in str(error)


def test_remote_call_turns_failures_into_datapipe_errors_but_leaves_missing_objects_to_the_caller():
    def denied():
        raise wrapped(BotoLike(403, "AccessDenied"))

    with pytest.raises(ConfigError, match="access denied"):
        remote_call(denied, "s3://b/k", "b/k", RetryPolicy(attempts=3, base_delay=0))

    def missing():
        raise FileNotFoundError("b/k")

    with pytest.raises(FileNotFoundError):
        remote_call(missing, "s3://b/k", "b/k", RetryPolicy(attempts=3, base_delay=0))
