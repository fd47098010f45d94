"""fsspec access: a URL becomes (filesystem, path); writes that appear whole or not at all; hashing."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any, BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from datapipe.errors import NotFoundError
from datapipe.storage.local import atomic_write

CHUNK = 4 << 20


def filesystem(url: str, storage_options: dict[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for ``url`` and the path within it (local paths made absolute)."""
    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    return fs, path


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


def read_bytes(fs: fsspec.AbstractFileSystem, path: str) -> bytes:
    """The whole content of a small file; NotFoundError naming it when missing."""
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such file") from None


def sha256_of(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """sha256 of a file, streamed in chunks."""
    digest = hashlib.sha256()
    try:
        with fs.open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such file") from None
    return digest.hexdigest()
