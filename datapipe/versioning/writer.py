"""Writing a version: shards staged in a partial directory, then the commit that publishes them.

Commit: shards into a partial directory, then moved under their version id (a rename on
local disks; on object stores server-side copies, many at once, then one bulk delete), then
manifest.json, then the ref, each written atomically. A crash leaves at worst a partial
directory that ``gc`` removes; every ref names a complete version.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import logging
import os
import shutil
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, BinaryIO, Protocol

from datapipe.errors import DatapipeError
from datapipe.formats.base import WrittenShard
from datapipe.formats.encoded import EncodedSamples
from datapipe.formats.registry import ShardFormat
from datapipe.formats.shards import INDEX_SUFFIX, write_shard_to
from datapipe.storage.fs import is_local, open_atomic, put_atomic
from datapipe.versioning.layout import (
    BUILD_STATE_NAME,
    LATEST,
    OWNER_NAME,
    PARTIAL_PREFIX,
    VERSIONS,
)
from datapipe.versioning.leases import Lease, LeaseStore
from datapipe.versioning.manifest import MANIFEST_NAME, Companion, Manifest, ShardEntry

log = logging.getLogger(__name__)
# server-side copies in flight at once when a commit moves shards on an object store
MOVE_THREADS = 16


class WriterStore(LeaseStore, Protocol):
    """What a writer needs of its store (versioning/store.py's Store, which makes writers)."""

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists in the store."""

    def read_ref(self, name: str, ref: str) -> str | None:
        """The version a ref names, or None."""

    def set_ref(self, name: str, ref: str, version: str) -> None:
        """Point ``ref`` at a complete version."""

    def versions(self, name: str) -> list[str]:
        """The complete versions of ``name``."""

    def manifest(self, name: str, version: str) -> Manifest:
        """The manifest of a version."""

    def shard_file(self, name: str, version: str, entry: ShardEntry, index: bool = False) -> str:
        """The path of ``entry``'s shard (its index, with ``index``) in a version."""


def write_shard_file(
    fs: Any, directory: str, filename: str, samples: Iterable[Mapping[str, Any]], fmt: ShardFormat
) -> ShardEntry:
    """Write one shard and its index into ``directory`` of ``fs``; runs where the data is (a Dask
    worker)."""
    written, index = write_shard_to(fs, f"{directory}/{filename}", samples, fmt)
    assert index is not None
    return _entry(filename, written, index, fmt)


# a shard up to this size is put together in memory first, so that one whose bytes are stored
# already is never written (a write and a delete cost more than the link that replaces them)
IN_MEMORY_BYTES = 16 << 20


def write_shard_unless_stored(
    fs: Any,
    directory: str,
    filename: str,
    blocks: Sequence[EncodedSamples],
    fmt: ShardFormat,
    stored: AbstractSet[str],
) -> tuple[ShardEntry, bool]:
    """``write_shard_file`` of ``blocks``, except a shard of at most IN_MEMORY_BYTES whose sha256 is
    in ``stored``, which is left unwritten; and whether it was written."""
    if not stored or sum(memoryview(b.data).nbytes for b in blocks) > IN_MEMORY_BYTES:
        return write_shard_file(fs, directory, filename, blocks, fmt), True
    buffer = io.BytesIO()
    writer = fmt.writer(buffer, name=f"{directory}/{filename}")
    writer.write_many(blocks)
    written = writer.finish()
    index = written.index.to_bytes()
    if written.sha256 in stored:
        return _entry(filename, written, index, fmt), False
    path = f"{directory}/{filename}"
    put_atomic(fs, path, buffer.getbuffer())
    for suffix, data in written.companions.items():
        put_atomic(fs, fmt.companion_path(path, suffix), data)
    put_atomic(fs, f"{path}{INDEX_SUFFIX}", index)  # the index last, as write_shard_to does
    return _entry(filename, written, index, fmt), True


def _entry(filename: str, written: WrittenShard, index: bytes, fmt: ShardFormat) -> ShardEntry:
    return ShardEntry(
        path=filename,
        samples=written.samples,
        bytes=written.size,
        sha256=written.sha256,
        index_path=filename + INDEX_SUFFIX,
        index_bytes=len(index),
        index_sha256=hashlib.sha256(index).hexdigest(),
        tokens=written.tokens,
        companions=tuple(
            Companion(suffix, len(data), hashlib.sha256(data).hexdigest())
            for suffix in fmt.companions
            for data in (written.companions[suffix],)
        ),
    )


class VersionWriter:
    """Stages one new version in a hidden partial directory; ``commit`` publishes it."""

    def __init__(self, store: WriterStore, name: str) -> None:
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
        ``number`` of ``split``: train-000000.tar, val-000000.tar."""
        return f"{split or 'shard'}-{number:06d}{fmt.extension}"

    def write_shard(
        self, number: int, samples: Iterable[Mapping[str, Any]], fmt: ShardFormat
    ) -> ShardEntry:
        """Write shard ``number`` (and its index) into the partial directory."""
        return write_shard_file(
            self.store.fs, self.partial, self.shard_filename(number, fmt), samples, fmt
        )

    def reuse_shard(self, parent: str, entry: ShardEntry, filename: str) -> ShardEntry:
        """Shard ``entry`` of version ``parent`` (and its index) as shard ``filename`` of this
        version, without its bytes passing through here: a hard link on the local disk (the same
        file under this version's name); on object stores, shared from the directory that holds it
        (``stored_in``, ``stored_as``)."""
        index = filename + INDEX_SUFFIX
        if not is_local(self.store.fs):
            names = entry.stored_names()
            shared = self.share_shard(entry, parent)
            return replace(
                shared,
                path=filename,
                index_path=index,
                stored_as=None if names == (filename, index) else names,
            )
        self._link(parent, entry, filename, over=False)
        return replace(entry, path=filename, index_path=index, stored_in=None, stored_as=None)

    def store_as(
        self, version: str, entry: ShardEntry, filename: str, written: bool = True
    ) -> ShardEntry:
        """Shard ``filename`` (and its index), of the same bytes as ``entry`` of ``version``, kept
        as that file instead of a second copy: a hard link on the local disk (in place of the files
        just written, when ``written``); on object stores, shared from the directory that holds it
        (written objects go with the partial directory)."""
        if not is_local(self.store.fs):
            return self.reuse_shard(version, entry, filename)
        self._link(version, entry, filename, over=written)
        index = filename + INDEX_SUFFIX
        return replace(entry, path=filename, index_path=index, stored_in=None, stored_as=None)

    def _link(self, version: str, entry: ShardEntry, filename: str, over: bool) -> None:
        """Hard-link ``entry``'s files of ``version`` (shard, index, companions) as ``filename``'s
        in the partial directory; ``over``: in place of the files there, which hold the same bytes
        (no reader sees a partial directory, so no rename is needed: where the link fails, a copy
        takes its place)."""
        renamed = replace(entry, path=filename, index_path=filename + INDEX_SUFFIX, stored_as=None)
        directory = self.store.shard_dir(self.name, version, entry)
        for src, new in zip(entry.stored_files(), renamed.stored_files(), strict=True):
            source, target = f"{directory}/{src}", f"{self.partial}/{new}"
            if over:
                os.unlink(target)
            try:
                os.link(source, target)
            except OSError:
                if over:
                    shutil.copyfile(source, target)
                raise

    def share_shard(self, entry: ShardEntry, parent_version: str) -> ShardEntry:
        """``entry`` of version ``parent_version`` reused in this version without copying a byte:
        the entry with ``stored_in`` naming the directory that holds the file (the parent's, or the
        one the parent itself shares it from). Put it in the manifest given to ``commit``.

        The writer leases ``parent_version`` until the commit (or abort), so a gc meanwhile keeps
        its files; a NotFoundError when that version is no more.
        """
        if parent_version not in self._leases:
            self._leases[parent_version] = Lease(
                self.store,
                self.name,
                parent_version,
                kind="build",
                note=f"shards shared by {self.partial.rsplit('/', 1)[-1]}",
            )
        return replace(
            entry, stored_in=entry.stored_in or parent_version, stored_as=entry.stored_as
        )

    def put_file(self, filename: str, data: bytes) -> None:
        """Stage a file of the version beside its shards (the tokenizer's copy), moved with them
        by the commit when the manifest lists it (``Manifest.own_files``)."""
        path = f"{self.partial}/{filename}"
        self.store.remote(path, lambda: put_atomic(self.store.fs, path, data))

    def put_build_state(self, write: Callable[[BinaryIO], None]) -> None:
        """Stage the build's state (builder/incremental.py), which ``write`` writes into a file,
        to be committed with the version, outside its id."""
        path = f"{self.partial}/{BUILD_STATE_NAME}"

        def put() -> None:
            with open_atomic(self.store.fs, path) as f:
                write(f)

        self.store.remote(path, put)
        self._side.append(BUILD_STATE_NAME)

    def commit(self, manifest: Manifest, refs: Iterable[str] = (LATEST,)) -> Manifest:
        """Publish: move the shards under the version id, write the manifest, then the refs.

        A version that already exists (same id) keeps its files and manifest; only refs move (and
        the side files this build staged, its build state, replace the older build's).
        """
        store, fs = self.store, self.store.fs
        manifest = (
            replace(
                manifest,
                name=self.name,
                parent=self.parent,
                created_at=_now("microseconds"),
                host=socket.gethostname(),
            )
            .in_written_format()
            .with_id()
        )
        final = store.path(self.name, VERSIONS, manifest.version)
        if manifest.version in store.versions(self.name):
            manifest = store.manifest(self.name, manifest.version)
            # the newest build's state replaces the older one's, outside the id
            self._move_side(final)
        else:
            owner, committing = (
                f"{self.partial}/{OWNER_NAME}",
                {**self._owner, "committing": manifest.version},
            )
            # gc leaves the version directory alone while this live writer fills it
            store.remote(owner, lambda: put_atomic(fs, owner, json.dumps(committing).encode()))
            store.remote(final, lambda: fs.makedirs(final, exist_ok=True))
            # shared: already in place
            names = [
                name
                for entry in manifest.shards
                if entry.stored_in is None
                for name in entry.stored_files()
            ]
            self._move(names + manifest.own_files(), final)
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
                "%s: the build state was not kept (%s); the next build of this dataset "
                "will be a full one",
                final,
                e,
            )

    def _move(self, names: list[str], final: str) -> None:
        """Move files from the partial directory to ``final``: renames on the local disk; on object
        stores server-side copies (the bytes never pass through this process), MOVE_THREADS at a
        time, then the sources go with the partial directory."""
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
        with ThreadPoolExecutor(
            min(MOVE_THREADS, max(len(names), 1)), thread_name_prefix="datapipe-commit"
        ) as pool:
            # raises the first failure; the manifest is then never written
            list(pool.map(copy, names))

    def abort(self) -> None:
        """Remove the partial directory and everything in it; end the leases on the versions shared
        from."""
        if self.store.exists(self.partial):
            self.store.remote(self.partial, lambda: self.store.fs.rm(self.partial, recursive=True))
        for lease in self._leases.values():
            lease.release()
        self._leases.clear()


def _now(timespec: str = "seconds") -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec=timespec)
