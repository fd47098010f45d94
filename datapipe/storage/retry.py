"""Retries for object-store calls: transient failures back off and try again, permanent ones fail at
once.

Transient: connection resets, timeouts, HTTP 5xx, throttling (429, SlowDown). Permanent: a
missing object, access denied, a wrong region or bucket, which the caller reports naming the
bucket and key. s3fs raises OSError subclasses with the botocore error as the cause; the
status is read from it by duck typing, so datapipe never imports botocore.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from datapipe.errors import ConfigError, DatapipeError, NotFoundError

log = logging.getLogger(__name__)
T = TypeVar("T")

_TRANSIENT_ERRNOS = {
    errno.ECONNRESET,
    errno.ETIMEDOUT,
    errno.EPIPE,
    errno.ECONNABORTED,
    errno.EAGAIN,
    errno.EBUSY,
}
_TRANSIENT_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "InternalError",
    "ServiceUnavailable",
    "503",
    "500",
    "502",
    "504",
}


@dataclass(frozen=True)
class RetryPolicy:
    """Up to ``attempts`` tries, sleeping base * 2**n (at most ``max_delay``) with full jitter
    between them."""

    attempts: int = 6
    base_delay: float = 0.2
    max_delay: float = 10.0

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, attempts: int | None = None
    ) -> RetryPolicy:
        """``attempts`` when given, else $DATAPIPE_RETRIES (tries in all, 1 = no retry), else 6."""
        env = os.environ if env is None else env
        if attempts is None and env.get("DATAPIPE_RETRIES"):
            try:
                attempts = int(env["DATAPIPE_RETRIES"])
            except ValueError:
                raise ConfigError(
                    f"DATAPIPE_RETRIES={env['DATAPIPE_RETRIES']!r}: expected a whole number "
                    "of tries (1 = no retry)"
                ) from None
        if attempts is None:
            return cls()
        if attempts < 1:
            raise ConfigError(f"retries: {attempts} tries; give at least 1 (1 = no retry)")
        return cls(attempts=attempts)

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


def _unreachable(error: BaseException) -> bool:
    """A refused connection or an unknown host: the client already tried it again; more tries only
    delay the error."""
    seen: BaseException | None = error
    while seen is not None:
        if (
            isinstance(seen, ConnectionRefusedError)
            or type(seen).__name__ == "EndpointConnectionError"
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def is_transient(error: BaseException) -> bool:
    """Whether trying again may succeed."""
    if isinstance(
        error,
        FileNotFoundError
        | PermissionError
        | IsADirectoryError
        | NotADirectoryError
        | DatapipeError,
    ):
        return False  # a DatapipeError is a verdict already (a sha256 mismatch, a missing shard)
    if _unreachable(error):
        return False
    status, code = _status(error)
    if status is not None or code is not None:
        return (status is not None and (status >= 500 or status == 429)) or code in _TRANSIENT_CODES
    if isinstance(error, ConnectionError | TimeoutError):
        return True
    if isinstance(error, OSError) and error.errno in _TRANSIENT_ERRNOS:
        return True
    text = f"{type(error).__name__} {error}".lower()
    return any(
        word in text
        for word in (
            "timeout",
            "timed out",
            "connection",
            "reset by peer",
            "throttl",
            "slow down",
            "service unavailable",
            "internal error",
        )
    )


def with_retries(
    call: Callable[[], T],
    what: str,
    policy: RetryPolicy | None = None,
    sleep: Callable[[float], Any] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """``call()``, tried again after transient errors; the last error (or a permanent one) is
    raised."""
    policy = policy or RetryPolicy.from_env()
    rng = rng or random.Random()
    for attempt in range(policy.attempts):
        try:
            return call()
        except Exception as e:
            if attempt + 1 >= policy.attempts or not is_transient(e):
                raise
            wait = policy.delay(attempt, rng)
            log.warning(
                "%s: %s (try %d of %d), again in %.2fs", what, e, attempt + 1, policy.attempts, wait
            )
            sleep(wait)
    raise AssertionError("unreachable")


def bucket_and_key(path: str) -> str:
    """ "bucket 'b', key 'k'" of an object-store path 'b/k'."""
    bucket, _, key = path.lstrip("/").partition("/")
    return f"bucket {bucket!r}, key {key!r}"


def _cause(error: BaseException) -> str:
    """The innermost message of an error chain (botocore's, not s3fs's wrapper of it)."""
    seen: BaseException = error
    while (seen.__cause__ or seen.__context__) is not None:
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
    text = str(seen) or type(seen).__name__
    return (
        text
        if seen is error
        else f"{error}: {text}"
        if str(error) and str(error) not in text
        else text
    )


def remote_error(error: BaseException, where: str, path: str, attempts: int = 1) -> DatapipeError:
    """A DatapipeError for a failed object-store call on ``path`` (shown as ``where``), naming
    bucket, key, cause."""
    if isinstance(error, DatapipeError):
        return error
    status, code = _status(error)
    names = bucket_and_key(path)
    if (
        isinstance(error, PermissionError)
        or status == 403
        or code in ("AccessDenied", "AllAccessDisabled")
    ):
        return ConfigError(
            f"{where}: access denied ({names}): {_cause(error)}; check the "
            "credentials and the storage options"
        )
    if code == "NoSuchBucket" or "NoSuchBucket" in str(error):
        bucket = path.lstrip("/").partition("/")[0]
        return NotFoundError(
            f"{where}: no bucket {bucket!r} ({_cause(error)}); check the URL and the endpoint"
        )
    if isinstance(error, FileNotFoundError):
        return NotFoundError(f"{where}: no such object ({names})")
    if _unreachable(error):
        return ConfigError(
            f"{where}: cannot reach the object store ({_cause(error)}); check endpoint_url "
            "(-o endpoint_url=...) and the network"
        )
    if status == 301 or code in (
        "PermanentRedirect",
        "AuthorizationHeaderMalformed",
        "IllegalLocationConstraint",
    ):
        return ConfigError(
            f"{where}: wrong region ({names}): {_cause(error)}; set the bucket's region "
            '(-o client_kwargs=\'{"region_name": "..."}\' or AWS_DEFAULT_REGION)'
        )
    tries = f" after {attempts} tries" if is_transient(error) and attempts > 1 else ""
    return DatapipeError(f"{where}: failed{tries} ({names}): {_cause(error)}")


def remote_call(
    call: Callable[[], T], where: str, path: str, policy: RetryPolicy | None = None
) -> T:
    """``call()`` with retries; a missing object stays FileNotFoundError (callers word it), any
    other failure becomes a DatapipeError naming bucket, key and cause (the CLI prints it without a
    traceback)."""
    policy = policy or RetryPolicy.from_env()
    try:
        return with_retries(call, where, policy)
    except (FileNotFoundError, DatapipeError):
        raise
    except Exception as e:
        raise remote_error(e, where, path, policy.attempts) from e
