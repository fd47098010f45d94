"""Retries for object-store calls: transient failures back off and try again, permanent ones fail at once.

Transient: connection resets, timeouts, HTTP 5xx, throttling (429, SlowDown). Permanent: a
missing object, access denied, a wrong region or bucket, which the caller reports naming the
bucket and key. s3fs raises OSError subclasses with the botocore error as the cause; the
status is read from it by duck typing, so datapipe never imports botocore.
"""

from __future__ import annotations

import errno
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

_TRANSIENT_ERRNOS = {errno.ECONNRESET, errno.ETIMEDOUT, errno.EPIPE, errno.ECONNABORTED, errno.EAGAIN, errno.EBUSY}
_TRANSIENT_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed",
                    "InternalError", "ServiceUnavailable", "503", "500", "502", "504"}


@dataclass(frozen=True)
class RetryPolicy:
    """Up to ``attempts`` tries, sleeping base * 2**n (at most ``max_delay``) with full jitter between them."""

    attempts: int = 6
    base_delay: float = 0.2
    max_delay: float = 10.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait before try ``attempt + 1`` (full jitter: uniform in [0, cap])."""
        return rng.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))


def _status(error: BaseException) -> tuple[int | None, str | None]:
    """(HTTP status, error code) of a botocore-style error anywhere in the cause chain."""
    seen: BaseException | None = error
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            meta = response.get("ResponseMetadata", {})
            return meta.get("HTTPStatusCode"), response.get("Error", {}).get("Code")
        seen = seen.__cause__ or seen.__context__
    return None, None


def is_transient(error: BaseException) -> bool:
    """Whether trying again may succeed."""
    if isinstance(error, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError):
        return False
    status, code = _status(error)
    if status is not None or code is not None:
        return (status is not None and (status >= 500 or status == 429)) or code in _TRANSIENT_CODES
    if isinstance(error, ConnectionError | TimeoutError):
        return True
    if isinstance(error, OSError) and error.errno in _TRANSIENT_ERRNOS:
        return True
    text = f"{type(error).__name__} {error}".lower()
    return any(word in text for word in ("timeout", "timed out", "connection", "reset by peer", "throttl",
                                         "slow down", "service unavailable", "internal error"))


def with_retries(call: Callable[[], T], what: str, policy: RetryPolicy | None = None,
                 sleep: Callable[[float], Any] = time.sleep, rng: random.Random | None = None) -> T:
    """``call()``, tried again after transient errors; the last error (or a permanent one) is raised."""
    policy = policy or RetryPolicy()
    rng = rng or random.Random()
    for attempt in range(policy.attempts):
        try:
            return call()
        except Exception as e:
            if attempt + 1 >= policy.attempts or not is_transient(e):
                raise
            wait = policy.delay(attempt, rng)
            log.warning("%s: %s (try %d of %d), again in %.2fs", what, e, attempt + 1, policy.attempts, wait)
            sleep(wait)
    raise AssertionError("unreachable")
