"""fsspec access: a URL becomes (filesystem, path); writes that appear whole or not at all;
hashing."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from datapipe.errors import ConfigError, NotFoundError
from datapipe.storage.local import atomic_write
from datapipe.storage.retry import RetryPolicy, remote_call

CHUNK = 4 << 20
T = TypeVar("T")


def filesystem(
    url: str, storage_options: dict[str, Any] | None = None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for ``url`` and the path within it (local paths made absolute).

    An unknown protocol (s4://), a protocol whose package is missing (s3:// without s3fs) or storage
    options the filesystem does not take are a ConfigError naming the URL.
    """
    try:
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except (ValueError, ImportError, TypeError) as e:
        protocol = url.split("://", 1)[0] if "://" in url else "file"
        raise ConfigError(
            f"{url}: cannot open this store ({e}); check the URL (a local path, "
            "s3://bucket/prefix, "
            f"or another fsspec protocol; {protocol!r} needs its fsspec package) "
            "and the -o storage "
            "options"
        ) from None
    return fs, path


def protocol_of(fs: fsspec.AbstractFileSystem) -> str:
    """The protocol of ``fs`` by its first name ("s3" of s3fs's ("s3", "s3a"), "file", "memory")."""
    return fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]


def url_of(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """``path`` of ``fs`` as a URL, for messages (s3://bucket/key)."""
    protocol = protocol_of(fs)
    return path if protocol in ("file", "local") else f"{protocol}://{path.lstrip('/')}"


def remote(
    fs: fsspec.AbstractFileSystem,
    path: str,
    call: Callable[[], T],
    policy: RetryPolicy | None = None,
) -> T:
    """``call()`` on ``path``: as is on the local disk; on object stores with retries (``policy``,
    default from $DATAPIPE_RETRIES), and any failure but a missing object turned into a
    DatapipeError naming the bucket, key and cause."""
    if is_local(fs):
        return call()
    return remote_call(call, url_of(fs, path), path, policy)


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    """True for the local disk, where rename is atomic and mmap works."""
    return isinstance(fs, LocalFileSystem)


@contextlib.contextmanager
def open_atomic(fs: fsspec.AbstractFileSystem, path: str) -> Iterator[BinaryIO]:
    """Open ``path`` for writing so that readers see the whole file or nothing.

    Local: a temporary sibling renamed into place. Object stores: one upload that is only
    committed when the block exits cleanly (a multipart upload is discarded on error).
    """
    if is_local(fs):
        fs.makedirs(fs._parent(path), exist_ok=True)
        with atomic_write(path) as f:
            yield f
        return
    f = fs.open(path, "wb")
    try:
        yield f
    except BaseException:
        discard = getattr(f, "discard", None)
        if discard is not None:
            discard()
        with contextlib.suppress(Exception):
            f.closed or f.close()  # memory:// commits on close; remove what it committed
            fs.rm_file(path)
        raise
    f.close()


def put_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """Write a small file in one piece (a single PUT on object stores)."""
    with open_atomic(fs, path) as f:
        f.write(data)


def read_bytes(
    fs: fsspec.AbstractFileSystem, path: str, policy: RetryPolicy | None = None
) -> bytes:
    """The whole content of a small file; NotFoundError naming it when missing."""
    try:
        return remote(fs, path, lambda: fs.cat_file(path), policy)
    except FileNotFoundError:
        raise NotFoundError(f"{url_of(fs, path)}: no such file") from None


def sha256_of(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """sha256 of a file, streamed in chunks."""

    def digest() -> str:
        hashed = hashlib.sha256()
        with fs.open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                hashed.update(chunk)
        return hashed.hexdigest()

    try:
        return remote(fs, path, digest)
    except FileNotFoundError:
        raise NotFoundError(f"{url_of(fs, path)}: no such file") from None
