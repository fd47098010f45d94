"""A local cache of remote shards, shared by the processes of one machine through file locks.

Layout: CACHE/<sha256 prefix>-<name> holds a verified copy, CACHE/<entry>.meta marks it as
downloaded by this cache (eviction touches nothing else), CACHE/<entry>.lock is the entry's
lock file, CACHE/.cache.lock the cache-wide one. Readers hold a shared lock while a shard is
open; a download holds the exclusive lock, writes CACHE/<entry>.tmp-<host>-<pid>-<8 hex>,
checks its sha256 against the manifest, makes room for it and renames it into place (those
two under the cache-wide lock, which listings share). Eviction deletes least recently used entries
(the .meta file's mtime, set in nanoseconds on every open) nobody has locked until the cache
is under its byte limit. Temporary files of crashed downloads are removed when a cache opens
(their exclusive lock died with their process); only names of exactly that pattern are.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.errors import ConfigError, NotFoundError, ShardCorruptError
from datapipe.storage.fs import url_of
from datapipe.storage.retry import RetryPolicy, bucket_and_key, remote_call

log = logging.getLogger(__name__)
CHUNK = 8 << 20
LEDGER = ".cache.lock"  # the cache-wide lock file (see ShardCache._ledger)
# <24 hex>-<name>.tmp-<host>-<pid>-<8 hex>: what _download names its temporary files, and nothing
# else
_TEMP = re.compile(r"^(?P<entry>[0-9a-f]{24}-[A-Za-z0-9._-]+)\.tmp-[^/]+-[0-9]+-[0-9a-f]{8}$")


def default_cache_dir(env: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """$DATAPIPE_CACHE, else $XDG_CACHE_HOME/datapipe/shards, else ~/.cache/datapipe/shards."""
    if env.get("DATAPIPE_CACHE"):
        return Path(env["DATAPIPE_CACHE"])
    base = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "datapipe" / "shards"


@dataclass
class CachedFile:
    """A verified local copy, locked (shared) against eviction until ``close``."""

    path: Path
    _lock: Any

    def close(self) -> None:
        """Let eviction have the file again."""
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def __enter__(self) -> CachedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ShardCache:
    """Downloads remote files once per machine, verified, and keeps the cache under ``limit``
    bytes."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        limit: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.limit = limit
        self.retry = retry or RetryPolicy.from_env()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cache_dir {self.directory}: cannot create it ({e})") from None
        self.cleanup()

    def _entry(self, path: str, sha256: str) -> str:
        name = re.sub(r"[^A-Za-z0-9._-]", "_", path.rsplit("/", 1)[-1])[-80:]
        # content-addressed: versions that share a shard share its copy
        return f"{sha256[:24]}-{name}"

    @contextlib.contextmanager
    def _locked(self, entry: str, mode: int) -> Iterator[Any]:
        # - held beyond this block on success
        handle = open(self.directory / f"{entry}.lock", "a+b")  # noqa: SIM115
        try:
            fcntl.flock(handle, mode)
            yield handle
        except BaseException:
            handle.close()
            raise

    def open(self, fs: Any, path: str, sha256: str, size: int) -> CachedFile:
        """The local copy of ``path`` (downloading it if needed), locked against eviction until
        closed."""
        entry = self._entry(path, sha256)
        final = self.directory / entry

        meta = self.directory / f"{entry}.meta"

        def complete() -> bool:
            return final.exists() and final.stat().st_size == size and meta.exists()

        with self._locked(entry, fcntl.LOCK_SH) as handle:
            if not complete():
                self._download_once(
                    handle,
                    lambda: remote_call(
                        lambda: self._download(fs, path, sha256, size, final),
                        url_of(fs, path),
                        path,
                        self.retry,
                    ),
                    complete,
                )
            now = time.time_ns()  # file times tick in jiffies: two opens within ~4 ms would tie
            os.utime(meta, ns=(now, now))  # most recently used
            cached = CachedFile(final, handle)
        self.evict()
        return cached

    @staticmethod
    def _download_once(handle: Any, download: Any, complete: Any) -> None:
        """Download under the exclusive lock unless another process finishes first; leave ``handle``
        shared.

        The exclusive lock is only tried, never waited for: readers hold the shared lock for as
        long as a shard is open, so waiting for exclusive could wait for them forever.
        """
        fcntl.flock(handle, fcntl.LOCK_UN)
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # someone downloads it, or reads a copy that is complete by now
                fcntl.flock(handle, fcntl.LOCK_SH)  # waits for a download to end, not for readers
                if complete():
                    return
                fcntl.flock(handle, fcntl.LOCK_UN)
                time.sleep(0.05)
                continue
            try:
                if not complete():
                    download()
            finally:
                fcntl.flock(handle, fcntl.LOCK_SH)
            return

    def _download(self, fs: Any, path: str, sha256: str, size: int, final: Path) -> None:
        where = url_of(fs, path)
        temp = final.with_name(
            f"{final.name}.tmp-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        )
        digest = hashlib.sha256()
        try:
            # get_file, not open: an open s3fs file asks for the object's details (a HEAD) before
            # its first GET; get_file is one GET (parts in parallel for a large object)
            fs.get_file(path, str(temp))
            with open(temp, "rb") as copy:
                while chunk := copy.read(CHUNK):
                    digest.update(chunk)
            if temp.stat().st_size != size or digest.hexdigest() != sha256:
                raise ShardCorruptError(
                    where,
                    f"downloaded {temp.stat().st_size} bytes whose sha256 does not match "
                    f"the manifest ({size} bytes); the object was changed or damaged",
                )
            meta = {"url": where, "sha256": sha256, "size": size, "downloaded": time.time()}
            with self._ledger(fcntl.LOCK_EX):
                if self.limit is not None:
                    # room first, so the cache never holds more than its limit
                    self._evict(incoming=size)
                # without data: skipped
                (self.directory / f"{final.name}.meta").write_text(json.dumps(meta))
                os.replace(temp, final)
        except FileNotFoundError:
            raise NotFoundError(f"{where}: no such object ({bucket_and_key(path)})") from None
        except PermissionError as e:
            raise ConfigError(
                f"{where}: access denied ({bucket_and_key(path)}): {e}; check the "
                "credentials and the storage_options"
            ) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()

    @contextlib.contextmanager
    def _ledger(self, mode: int) -> Iterator[None]:
        """The cache-wide lock: evicting and landing a download hold it exclusively (briefly, never
        while waiting on an entry), listing shared, so a listing never shows an entry that was
        evicted together with the one that replaced it."""
        with open(self.directory / LEDGER, "a+b") as handle:
            fcntl.flock(handle, mode)
            yield

    def _entries(self) -> list[tuple[int, int, str]]:
        out = []
        for name in os.listdir(self.directory):
            if name.endswith(".meta"):
                entry = name[: -len(".meta")]
                with contextlib.suppress(FileNotFoundError):
                    used = (self.directory / name).stat().st_mtime_ns
                    out.append((used, (self.directory / entry).stat().st_size, entry))
        return sorted(out)

    def entries(self) -> list[tuple[int, int, str]]:
        """(last use in ns, bytes, entry) of every complete entry this cache downloaded, least
        recent first."""
        with self._ledger(fcntl.LOCK_SH):
            return self._entries()

    def size(self) -> int:
        """Bytes held by complete entries."""
        return sum(size for _, size, _ in self.entries())

    def evict(self, incoming: int = 0) -> None:
        """Delete least recently used entries that no process has open until under the limit (with
        room for ``incoming`` bytes about to be added)."""
        if self.limit is None:
            return
        with self._ledger(fcntl.LOCK_EX):
            self._evict(incoming)

    def _evict(self, incoming: int) -> None:
        assert self.limit is not None
        entries = self._entries()
        total = sum(size for _, size, _ in entries) + incoming
        for _, size, entry in entries:
            if total <= self.limit:
                return
            with open(self.directory / f"{entry}.lock", "a+b") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # open by a reader, or being downloaded
                (self.directory / f"{entry}.meta").unlink(missing_ok=True)
                (self.directory / entry).unlink(missing_ok=True)
                total -= size
        if total > self.limit:
            log.info(
                "cache %s: %d bytes, over its limit of %d: the rest is in use",
                self.directory,
                total,
                self.limit,
            )

    def cleanup(self) -> None:
        """Remove temporary files of downloads whose process died (nobody holds their entry's lock).

        Only names this cache gives its temporary files; anything else in the folder is left alone.
        """
        for temp in self.directory.glob("*.tmp-*"):
            match = _TEMP.match(temp.name)
            if not match:
                continue
            with open(self.directory / f"{match['entry']}.lock", "a+b") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live download
                temp.unlink(missing_ok=True)
