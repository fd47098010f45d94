"""The dataset store on any fsspec URL, and the commit protocol that publishes a version.

Layout (documented in docs/reference/store.md and schemas/manifest.schema.json):

    STORE/NAME/versions/VERSION/shard-000000.tar      shards (or .tfrecord) and their .idx
    STORE/NAME/versions/VERSION/train-000000.tar      ... named by their split, in a version with
    splits STORE/NAME/versions/VERSION/manifest.json         written last: a version is complete iff
    it exists STORE/NAME/versions/VERSION/rejected.parquet      quarantined rows, when there are any
    STORE/NAME/versions/VERSION/pruned.json           a pruned version that still holds shards
    others share STORE/NAME/versions/.partial-ID/                  a version being written (never
    listed) STORE/NAME/refs/latest, STORE/NAME/refs/TAG       a version id and a newline
    STORE/NAME/leases/ID.json                         a hold on a version (versioning/leases.py)
    STORE/NAME/rejected/TIME-ID.parquet               quarantine of a build that failed (kept for
    the user)

A shard entry with ``stored_in`` lies in that version's directory instead (shared, stored once).

Commit: shards into a partial directory, then moved under their version id (a rename on
local disks; on object stores server-side copies, many at once, then one bulk delete), then
manifest.json, then the ref, each written atomically. A crash leaves at worst a partial
directory that ``gc`` removes; every ref names a complete version.

Reads and writes of an object store go through ``remote``: transient failures are retried, a
missing bucket, access denied or an unreachable endpoint is an error naming bucket, key and cause.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import re
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

from datapipe.errors import ConfigError, DatapipeError, NotFoundError
from datapipe.formats.registry import ShardFormat
from datapipe.formats.shards import INDEX_SUFFIX, write_shard_to
from datapipe.storage.fs import filesystem, is_local, put_atomic, read_bytes, remote
from datapipe.storage.retry import RetryPolicy
from datapipe.versioning.leases import Lease
from datapipe.versioning.manifest import MANIFEST_NAME, Manifest, ShardEntry, short_id

VERSIONS = "versions"
REFS = "refs"
LATEST = "latest"
PARTIAL_PREFIX = ".partial-"
OWNER_NAME = ".owner.json"
# what the build knew (builder/incremental.py): outside the manifest and the id
BUILD_STATE_NAME = "build-state.npz"
MIN_PREFIX = 6
_REF_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_HEX = re.compile(r"^[0-9a-f]+$")
log = logging.getLogger(__name__)
# server-side copies in flight at once when a commit moves shards on an object store
MOVE_THREADS = 16
T = TypeVar("T")


def check_ref_name(ref: str) -> str:
    """Tags and refs: letters, digits, '.', '_', '-'; not starting with a dot."""
    if not _REF_NAME.match(ref):
        raise ConfigError(f"invalid ref name {ref!r}: use letters, digits, '.', '_' and '-' (128 at most)")
    return ref


def check_dataset_name(name: str) -> str:
    """Dataset names follow the ref rule, so they are safe as path components on every store."""
    if not _REF_NAME.match(name):
        raise ConfigError(f"invalid dataset name {name!r}: use letters, digits, '.', '_' and '-'")
    return name


def parse_dataset_url(url: str) -> tuple[str, str, str]:
    """'STORE/NAME[@REF]' -> (store URL, name, ref or version prefix; 'latest' by default)."""
    head, _, last = url.rstrip("/").rpartition("/")
    if not last:
        raise ConfigError(f"{url!r} is not a dataset URL: expected STORE/NAME[@REF], e.g. storage/digits@latest")
    name, _, ref = last.partition("@")
    return head or ".", check_dataset_name(name), ref or LATEST


class Store:
    """A dataset store rooted at ``url`` (a local path or any fsspec URL)."""

    def __init__(
        self, url: str = "storage", storage_options: Mapping[str, Any] | None = None, retry: RetryPolicy | None = None
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
        not
        fork-safe, and DataLoader workers are forks)."""
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

    def _exists(self, path: str) -> bool:
        return self.remote(path, lambda: self.fs.exists(path))

    def check_bucket(self) -> None:
        """On an object store, a NotFoundError naming the bucket when it does not exist (listing a
        missing
        bucket looks like listing an empty prefix)."""
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
                what = "is a file" if path == os.path.abspath(self.root) else f"is under a file ({path})"
                raise ConfigError(
                    f"{self.url}: the store {what}, not a directory; give a directory for "
                    "the store "
                    "(it is created when missing)"
                )
        elif self.fs.isfile(self.root):
            raise ConfigError(f"{self.url}: the store is a file, not a directory; give a directory for the store")

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
        names = [n for n in self.entry_names(self.root) if self._exists(self.path(n, VERSIONS))]
        if not names:
            self.check_bucket()
        return names

    def versions(self, name: str) -> list[str]:
        """Complete versions (with a manifest) of dataset ``name``."""
        return [
            v
            for v in self.entry_names(self.path(name, VERSIONS))
            if not v.startswith(".") and self._exists(self.path(name, VERSIONS, v, MANIFEST_NAME))
        ]

    def is_complete(self, name: str, version: str) -> bool:
        """Whether ``version`` of ``name`` has its manifest (is complete)."""
        return self._exists(self.path(name, VERSIONS, version, MANIFEST_NAME))

    def refs(self, name: str) -> dict[str, str]:
        """ref name -> version id."""
        return {r: self.read_ref(name, r) for r in self.entry_names(self.path(name, REFS)) if not r.startswith(".")}

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

    def build_state(self, name: str, version: str) -> bytes | None:
        """The build state a build left beside version ``version`` (None when there is none)."""
        path = self.path(name, VERSIONS, version, BUILD_STATE_NAME)
        return read_bytes(self.fs, path) if self._exists(path) else None

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
        if not self._exists(self.path(name, VERSIONS)):
            known = ", ".join(self.datasets()) or "none"
            raise NotFoundError(f"{self.url}: no dataset {name!r} (datasets here: {known})")
        version = self.read_ref(name, ref) if _REF_NAME.match(ref) else None
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
                f"{self.url}/{name}: no version starting with {ref} (refs: {refs}; versions: {versions or 'none'})"
            )
        raise NotFoundError(
            f"{self.url}/{name}: no ref {ref!r} (refs: {refs}; versions: {versions or 'none'}); a "
            f"version prefix needs {MIN_PREFIX}+ hex digits"
        )

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


def write_shard_file(
    fs: Any, directory: str, filename: str, samples: Iterable[Mapping[str, Any]], fmt: ShardFormat
) -> ShardEntry:
    """Write one shard and its index into ``directory`` of ``fs``; runs where the data is (a Dask
    worker)."""
    written, index = write_shard_to(fs, f"{directory}/{filename}", samples, fmt)
    assert index is not None
    return ShardEntry(
        path=filename,
        samples=written.samples,
        bytes=written.size,
        sha256=written.sha256,
        index_path=filename + INDEX_SUFFIX,
        index_bytes=len(index),
        index_sha256=hashlib.sha256(index).hexdigest(),
    )


class VersionWriter:
    """Stages one new version in a hidden partial directory; ``commit`` publishes it."""

    def __init__(self, store: Store, name: str) -> None:
        self.store = store
        self.name = name
        self.parent = store.read_ref(name, LATEST)
        # version -> this writer's lease on it, for the shards it shares
        self._leases: dict[str, Lease] = {}
        # files beside the shards that go with the version, outside its manifest
        self._side: list[str] = []
        self.partial = store.path(name, VERSIONS, f"{PARTIAL_PREFIX}{uuid.uuid4().hex}")
        self._owner = {"host": socket.gethostname(), "pid": os.getpid(), "started": _now()}
        owner = json.dumps(self._owner).encode()

        def start() -> None:
            store.fs.makedirs(self.partial, exist_ok=True)
            put_atomic(store.fs, f"{self.partial}/{OWNER_NAME}", owner)

        store.remote(self.partial, start)

    @staticmethod
    def shard_filename(number: int, fmt: ShardFormat, split: str | None = None) -> str:
        """Name of shard ``number``: shard-000000.tar and so on; in a version with splits, shard
        ``number`` of
        ``split``: train-000000.tar, val-000000.tar."""
        return f"{split or 'shard'}-{number:06d}{fmt.extension}"

    def write_shard(self, number: int, samples: Iterable[Mapping[str, Any]], fmt: ShardFormat) -> ShardEntry:
        """Write shard ``number`` (and its index) into the partial directory."""
        return write_shard_file(self.store.fs, self.partial, self.shard_filename(number, fmt), samples, fmt)

    def reuse_shard(self, parent: str, entry: ShardEntry, filename: str) -> ShardEntry:
        """Shard ``entry`` of version ``parent`` (and its index) as shard ``filename`` of this
        version, without
        its bytes passing through here: a hard link on the local disk (the same file under this
        version's name); on object stores, shared from the directory that holds it (``stored_in``,
        ``stored_as``)."""
        index = filename + INDEX_SUFFIX
        if not is_local(self.store.fs):
            names = entry.stored_names()
            shared = self.share_shard(entry, parent)
            return replace(
                shared, path=filename, index_path=index, stored_as=None if names == (filename, index) else names
            )
        for src, new in (
            (self.store.shard_file(self.name, parent, entry), filename),
            (self.store.shard_file(self.name, parent, entry, index=True), index),
        ):
            os.link(src, f"{self.partial}/{new}")
        return replace(entry, path=filename, index_path=index, stored_in=None, stored_as=None)

    def share_shard(self, entry: ShardEntry, parent_version: str) -> ShardEntry:
        """``entry`` of version ``parent_version`` reused in this version without copying a byte:
        the entry with
        ``stored_in`` naming the directory that holds the file (the parent's, or the one the parent
        itself shares it from). Put it in the manifest given to ``commit``.

        The writer leases ``parent_version`` until the commit (or abort), so a gc meanwhile keeps
        its files;
        a NotFoundError when that version is no more.
        """
        if parent_version not in self._leases:
            self._leases[parent_version] = Lease(
                self.store,
                self.name,
                parent_version,
                kind="build",
                note=f"shards shared by {self.partial.rsplit('/', 1)[-1]}",
            )
        return replace(entry, stored_in=entry.stored_in or parent_version, stored_as=entry.stored_as)

    def put_build_state(self, data: bytes) -> None:
        """Stage the build's state (builder/incremental.py) to be committed with the version,
        outside its id."""
        path = f"{self.partial}/{BUILD_STATE_NAME}"
        self.store.remote(path, lambda: put_atomic(self.store.fs, path, data))
        self._side.append(BUILD_STATE_NAME)

    def commit(self, manifest: Manifest, refs: Iterable[str] = (LATEST,)) -> Manifest:
        """Publish: move the shards under the version id, write the manifest, then the refs.

        A version that already exists (same id) keeps its files and manifest; only refs move (and
        the side files this build staged, its build state, replace the older build's).
        """
        store, fs = self.store, self.store.fs
        manifest = replace(
            manifest, name=self.name, parent=self.parent, created_at=_now("microseconds"), host=socket.gethostname()
        ).with_id()
        final = store.path(self.name, VERSIONS, manifest.version)
        if manifest.version in store.versions(self.name):
            manifest = store.manifest(self.name, manifest.version)
            # the newest build's state replaces the older one's, outside the id
            self._move_side(final)
        else:
            owner, committing = f"{self.partial}/{OWNER_NAME}", {**self._owner, "committing": manifest.version}
            # gc leaves the version directory alone while this live writer fills it
            store.remote(owner, lambda: put_atomic(fs, owner, json.dumps(committing).encode()))
            store.remote(final, lambda: fs.makedirs(final, exist_ok=True))
            # shared: already in place
            names = [
                name for entry in manifest.shards if entry.stored_in is None for name in (entry.path, entry.index_path)
            ]
            self._move(names + ([manifest.rejected] if manifest.rejected else []), final)
            self._move_side(final)
            where = f"{final}/{MANIFEST_NAME}"
            # after every shard is in place
            store.remote(where, lambda: put_atomic(fs, where, manifest.to_json()))
        self.abort()
        for ref in refs:
            store.set_ref(self.name, ref, manifest.version)
        return manifest

    def _move_side(self, final: str) -> None:
        """Move the side files (the build state) to ``final``; one that fails costs only the next
        build's speed."""
        try:
            self._move(self._side, final)
        except (DatapipeError, OSError) as e:
            log.warning(
                "%s: the build state was not kept (%s); the next build of this dataset will be a full one", final, e
            )

    def _move(self, names: list[str], final: str) -> None:
        """Move files from the partial directory to ``final``: renames on the local disk; on object
        stores
        server-side copies (the bytes never pass through this process), MOVE_THREADS at a time, then
        the sources go with the partial directory."""
        fs = self.store.fs
        if is_local(fs):
            for name in names:
                fs.mv(f"{self.partial}/{name}", f"{final}/{name}")
            return

        def copy(name: str) -> None:
            source = f"{self.partial}/{name}"
            self.store.remote(source, lambda: fs.cp_file(source, f"{final}/{name}"))

        # a copy first asks for the size of its source (a HEAD each); one listing of the partial
        # directory, now that every file is in it, answers them all from the file system's listings
        # cache
        if names:
            self.store.remote(self.partial, lambda: fs.ls(self.partial, detail=True, refresh=True))
        with ThreadPoolExecutor(min(MOVE_THREADS, max(len(names), 1)), thread_name_prefix="datapipe-commit") as pool:
            # raises the first failure; the manifest is then never written
            list(pool.map(copy, names))

    def abort(self) -> None:
        """Remove the partial directory and everything in it; end the leases on the versions shared
        from."""
        if self.store._exists(self.partial):
            self.store.remote(self.partial, lambda: self.store.fs.rm(self.partial, recursive=True))
        for lease in self._leases.values():
            lease.release()
        self._leases.clear()


def _now(timespec: str = "seconds") -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec=timespec)
