"""Retries: transient errors back off and try again; permanent ones fail at once."""

import errno
import random

import pytest

from datapipe.storage.retry import RetryPolicy, is_transient, with_retries


class BotoLike(OSError):
    def __init__(self, status: int, code: str) -> None:
        super().__init__(f"{code} ({status})")
        self.response = {"ResponseMetadata": {"HTTPStatusCode": status}, "Error": {"Code": code}}


def wrapped(cause: BaseException) -> OSError:
    try:
        raise OSError(errno.EIO, "s3fs said so") from cause
    except OSError as e:
        return e


@pytest.mark.parametrize("error, transient", [
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
])
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
        with_retries(always_down, "get", RetryPolicy(attempts=3, base_delay=0), sleep=lambda s: None)
    assert len(calls) == 4
