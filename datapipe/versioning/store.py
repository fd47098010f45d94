"""The dataset store on any fsspec URL: its datasets, versions, refs and manifests.

Where things lie is in :mod:`datapipe.versioning.layout`; writing a version and the commit that
publishes it, in :mod:`datapipe.versioning.writer` (``Store.begin`` starts one).

Reads and writes of an object store go through ``remote``: transient failures are retried, a
missing bucket, access denied or an unreachable endpoint is an error naming bucket, key and cause.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from datapipe.errors import ConfigError, DatapipeError, NotFoundError, did_you_mean, nearest
from datapipe.storage.fs import filesystem, is_local, put_atomic, read_bytes, remote, url_of
from datapipe.storage.retry import RetryPolicy
from datapipe.versioning.layout import (
    BUILD_STATE_NAME,
    LATEST,
    OWNER_NAME,
    PARTIAL_PREFIX,
    REF_NAME,
    REFS,
    VERSIONS,
    check_dataset_name,
    check_ref_name,
    parse_dataset_url,
)
from datapipe.versioning.manifest import MANIFEST_NAME, Manifest, ShardEntry, short_id
from datapipe.versioning.writer import VersionWriter, write_shard_file

# the names of the store's layout and its writer, importable from here as before they had modules
__all__ = [
    "BUILD_STATE_NAME",
    "LATEST",
    "MIN_PREFIX",
    "OWNER_NAME",
    "PARTIAL_PREFIX",
    "REFS",
    "VERSIONS",
    "Store",
    "VersionWriter",
    "check_dataset_name",
    "check_ref_name",
    "open_dataset_url",
    "parse_dataset_url",
    "write_shard_file",
]

MIN_PREFIX = 6  # hex digits of a version prefix that may name a version
_HEX = re.compile(r"^[0-9a-f]+$")
T = TypeVar("T")


class Store:
    """A dataset store rooted at ``url`` (a local path or any fsspec URL)."""

    def __init__(
        self,
        url: str = "storage",
        storage_options: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.retry = retry or RetryPolicy.from_env()  # for reads and writes of an object store
        self._fs, self.root = filesystem(url, self.storage_options)
        self._pid = os.getpid()
        self._bucket_seen = False

    @property
    def fs(self) -> Any:
        """The store's filesystem; made anew in a forked child (async filesystems such as s3fs are
        not fork-safe, and DataLoader workers are forks)."""
        if self._pid != os.getpid():
            self._fs, _ = filesystem(self.url, self.storage_options)
            self._pid = os.getpid()
        return self._fs

    def path(self, *parts: str) -> str:
        """The filesystem path of ``parts`` below the store root."""
        return "/".join([self.root.rstrip("/"), *parts])

    def remote(self, path: str, call: Callable[[], T]) -> T:
        """``call()`` on ``path`` of this store: retried on object stores, failures named (see
        storage.fs.remote)."""
        return remote(self.fs, path, call, self.retry)

    def exists(self, path: str) -> bool:
        """Whether ``path`` of this store exists (retried on object stores)."""
        return self.remote(path, lambda: self.fs.exists(path))

    def check_bucket(self) -> None:
        """On an object store, a NotFoundError naming the bucket when it does not exist (listing a
        missing bucket looks like listing an empty prefix)."""
        if self._bucket_seen or is_local(self.fs) or self.root.startswith("/") or not self.root:
            return
        bucket = self.root.split("/", 1)[0]
        if not self.remote(bucket, lambda: self.fs.exists(bucket)):
            raise NotFoundError(
                f"{self.url}: bucket {bucket!r} does not exist (or these credentials "
                "cannot see it); "
                "check the URL, the endpoint and the credentials"
            )
        self._bucket_seen = True

    def check_location(self) -> None:
        """A store that is a file (or under one) is a ConfigError before anything runs, not an
        OSError after it."""
        if is_local(self.fs):
            path = os.path.abspath(self.root)
            while not os.path.exists(path) and os.path.dirname(path) != path:
                path = os.path.dirname(path)
            if os.path.exists(path) and not os.path.isdir(path):
                what = (
                    "is a file"
                    if path == os.path.abspath(self.root)
                    else f"is under a file ({path})"
                )
                raise ConfigError(
                    f"{self.url}: the store {what}, not a directory; give a directory for "
                    "the store "
                    "(it is created when missing)"
                )
        elif self.fs.isfile(self.root):
            raise ConfigError(
                f"{self.url}: the store is a file, not a directory; give a directory for the store"
            )

    def entry_names(self, path: str) -> list[str]:
        """Sorted names of the entries directly below ``path`` of this store (none when it does not
        exist)."""
        try:
            entries = self.remote(path, lambda: self.fs.ls(path, detail=False))
        except FileNotFoundError:
            self.check_bucket()
            return []
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def datasets(self) -> list[str]:
        """Names of the datasets in this store."""
        names = [n for n in self.entry_names(self.root) if self.exists(self.path(n, VERSIONS))]
        if not names:
            self.check_bucket()
        return names

    def versions(self, name: str) -> list[str]:
        """Complete versions (with a manifest) of dataset ``name``."""
        return [
            v
            for v in self.entry_names(self.path(name, VERSIONS))
            if not v.startswith(".") and self.exists(self.path(name, VERSIONS, v, MANIFEST_NAME))
        ]

    def is_complete(self, name: str, version: str) -> bool:
        """Whether ``version`` of ``name`` has its manifest (is complete)."""
        return self.exists(self.path(name, VERSIONS, version, MANIFEST_NAME))

    def refs(self, name: str) -> dict[str, str]:
        """ref name -> version id."""
        return {
            r: self.read_ref(name, r)
            for r in self.entry_names(self.path(name, REFS))
            if not r.startswith(".")
        }

    def read_ref(self, name: str, ref: str) -> str | None:
        """The version a ref names, or None when the ref does not exist."""
        path = self.path(name, REFS, ref)
        try:
            return self.remote(path, lambda: self.fs.cat_file(path)).decode().strip()
        except FileNotFoundError:
            return None

    def set_ref(self, name: str, ref: str, version: str) -> None:
        """Point ``ref`` at a complete version (one atomic write)."""
        check_ref_name(ref)
        if version not in self.versions(name):
            raise NotFoundError(f"{self.url}/{name}: no complete version {version}")
        path = self.path(name, REFS, ref)

        def write() -> None:
            self.fs.makedirs(self.path(name, REFS), exist_ok=True)
            put_atomic(self.fs, path, f"{version}\n".encode())

        self.remote(path, write)

    def build_state_path(self, name: str, version: str) -> str | None:
        """The path of the build state beside version ``version`` (None when there is none)."""
        path = self.path(name, VERSIONS, version, BUILD_STATE_NAME)
        return path if self.exists(path) else None

    def shard_dir(self, name: str, version: str, entry: ShardEntry) -> str:
        """The directory that holds ``entry``'s shard and index: its ``stored_in`` version's, else
        ``version``'s."""
        return self.path(name, VERSIONS, entry.stored_in or version)

    def shard_file(self, name: str, version: str, entry: ShardEntry, index: bool = False) -> str:
        """The path of ``entry``'s shard (its index, with ``index``) in version ``version`` of
        ``name``."""
        shard, index_name = entry.stored_names()
        return f"{self.shard_dir(name, version, entry)}/{index_name if index else shard}"

    def manifest(self, name: str, version: str) -> Manifest:
        """The manifest of a version."""
        where = self.path(name, VERSIONS, version, MANIFEST_NAME)
        try:
            data = read_bytes(self.fs, where, self.retry)
        except NotFoundError:
            raise NotFoundError(f"{self.url}/{name}@{version}: no such version") from None
        return Manifest.from_json(data, where)

    def resolve(self, name: str, ref: str = LATEST) -> str:
        """The version id that a ref, tag or unique version prefix (6+ hex digits) names."""
        if not self.exists(self.path(name, VERSIONS)):
            raise self.no_dataset(name)
        version = self.read_ref(name, ref) if REF_NAME.match(ref) else None
        if version is not None:
            return version
        refs = ", ".join(self.refs(name)) or "none"
        known = self.versions(name)
        versions = ", ".join(short_id(v) for v in known[:10]) + (
            f" and {len(known) - 10} more" if len(known) > 10 else ""
        )
        if len(ref) >= MIN_PREFIX and _HEX.match(ref):
            matches = [v for v in known if v.startswith(ref)]
            if len(matches) == 1:
                return matches[0]
            if matches:
                raise ConfigError(
                    f"{self.url}/{name}@{ref} is ambiguous: it matches "
                    f"{', '.join(m[:16] for m in matches)}; "
                    "give more digits"
                )
            raise NotFoundError(
                f"{self.url}/{name}: no version starting with {ref} (refs: {refs}; "
                f"versions: {versions or 'none'})"
            )
        raise NotFoundError(
            f"{self.url}/{name}: no ref {ref!r} (refs: {refs}; versions: {versions or 'none'}); a "
            f"version prefix needs {MIN_PREFIX}+ hex digits"
        )

    def no_dataset(self, name: str, fix: str = "") -> NotFoundError:
        """The error for dataset ``name`` missing here: a store folder that does not exist is said
        so (with a folder beside it of a near name); else the datasets here, a near one first.
        ``fix``: what to do, after the message."""
        absent = self.absent()
        if absent is not None:
            return absent
        known = self.datasets()
        return NotFoundError(
            f"{self.url}: no dataset {name!r}{did_you_mean([name], known)} (datasets here: "
            f"{', '.join(known) or 'none'})" + (f"; {fix}" if fix else "")
        )

    def absent(self) -> NotFoundError | None:
        """The error for a store whose folder does not exist (a near folder beside it suggested),
        or None when it exists. On an object store, a missing bucket is its own error."""
        if not self.exists(self.root):
            self.check_bucket()
            parent, _, base = self.root.rstrip("/").rpartition("/")
            near = nearest(base, self._folders(parent or "/"))
            hint = (
                "give the store the build wrote to (build --out, default storage)"
                if near is None
                else f"did you mean {self._beside(near)!r}?"
            )
            return NotFoundError(
                f"{self.url}: no such store: the folder {url_of(self.fs, self.root)} does not "
                f"exist; {hint}"
            )
        return None

    def _folders(self, path: str) -> list[str]:
        """The names of the folders directly below ``path`` (none when it cannot be listed)."""
        try:
            entries = self.remote(path, lambda: self.fs.ls(path, detail=True))
        except (OSError, DatapipeError):
            return []
        return [
            e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e["type"] == "directory"
        ]

    def _beside(self, folder: str) -> str:
        """``folder``, a sibling of the store's folder, as the user would write it in place of the
        store's URL."""
        head, sep, _ = self.url.rstrip("/").rpartition("/")
        return f"{head}{sep}{folder}"

    def begin(self, name: str) -> VersionWriter:
        """Start writing a new version of ``name`` (into an existing bucket: s3fs would create a
        missing one)."""
        check_dataset_name(name)
        self.check_bucket()
        return VersionWriter(self, name)


def open_dataset_url(
    url: str, storage_options: Mapping[str, Any] | None = None, retry: RetryPolicy | None = None
) -> tuple[Store, str, Manifest]:
    """Resolve 'STORE/NAME[@REF]' to its store, name and manifest."""
    store_url, name, ref = parse_dataset_url(url)
    store = Store(store_url, storage_options, retry)
    return store, name, store.manifest(name, store.resolve(name, ref))
