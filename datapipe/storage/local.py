"""Local files: atomic writes and read-only memory maps."""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from datapipe.errors import NotFoundError

# Buffers handed to readers: an mmap for real files, bytes for empty files (mmap cannot map 0
# bytes).
Buffer = mmap.mmap | bytes


def temp_name(path: Path) -> Path:
    """A hidden sibling of ``path`` that no reader lists: where a write lands before its rename."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open ``path`` for writing so that it appears complete or not at all.

    Bytes go to a temporary sibling that is fsynced and renamed over ``path`` only when the
    block exits cleanly; on an exception the temporary file is removed.
    """
    path = Path(path)
    tmp = temp_name(path)
    f = open(tmp, "wb")
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
    except BaseException:
        f.close()
        tmp.unlink(missing_ok=True)
        raise


def map_file(path: str | os.PathLike[str]) -> Buffer:
    """Map a local file read-only; pages are read on demand, nothing is copied up front."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return b""
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise NotFoundError(f"{path}: is a directory, expected a file") from None


def release(buffer: Buffer) -> None:
    """Close a mapped buffer unless sample views still point into it (then the GC closes it)."""
    if isinstance(buffer, mmap.mmap):
        with contextlib.suppress(BufferError):
            buffer.close()


MADV_POPULATE_READ = 22  # Linux 5.14's madvise advice, where Python's mmap does not name it


def populate_pages(buffer: Buffer) -> None:
    """Map every page of a mapped file into this process in one call (Linux 5.14 or later; else
    nothing): for a reader about to touch pages all over the file, which would fault them in a
    few at a time."""
    advice = getattr(mmap, "MADV_POPULATE_READ", MADV_POPULATE_READ)
    if sys.platform == "linux" and isinstance(buffer, mmap.mmap) and not buffer.closed:
        with contextlib.suppress(OSError, ValueError):
            buffer.madvise(advice)


def drop_pages(buffer: Buffer) -> None:
    """Unmap the pages of a mapped file from this process (they stay in the page cache).

    Keeps a reader's resident memory at what one batch touches, however many shards it has
    open; touching the bytes again maps them back from the page cache.
    """
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if isinstance(buffer, mmap.mmap) and advice is not None and not buffer.closed:
        with contextlib.suppress(OSError, ValueError):
            buffer.madvise(advice)
