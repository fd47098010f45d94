"""What a dataset's versions weigh: own, shared and stored bytes, each file on disk counted once."""

from __future__ import annotations

import os
import stat
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from datapipe.storage.fs import is_local
from datapipe.versioning.manifest import Manifest, ShardEntry
from datapipe.versioning.store import Store


@dataclass(frozen=True)
class VersionSizes:
    """A version's shard bytes: ``own`` in files no other version lists, ``shared`` in files stored
    once for it and at least one other version (``own + shared == bytes``)."""

    bytes: int
    own_bytes: int
    shared_bytes: int


def file_key(store: Store, name: str, version: str, entry: ShardEntry, filename: str) -> Hashable:
    """What tells one stored file (``filename`` of ``entry``: its shard or a companion) from
    another: on the local disk its inode, so that hard links (an incremental build's reused shards)
    are one file; on object stores the object's path, so that a shard listed through ``stored_in``
    is the object it names."""
    path = f"{store.shard_dir(name, version, entry)}/{filename}"
    if is_local(store.fs):
        try:
            info = os.stat(path)
        except OSError:  # missing: `datapipe verify` says so; here it is a file of its own
            return path
        return (info.st_dev, info.st_ino)
    return store.fs._strip_protocol(path)


def data_files(entry: ShardEntry) -> list[tuple[str, int]]:
    """The files that hold a shard's data, each with its bytes: the shard and its companions (its
    index is not counted)."""
    return [(entry.stored_names()[0], entry.bytes)] + [
        (filename, c.bytes) for c, filename in entry.companion_names()
    ]


class Sharing:
    """Which versions of one dataset list each stored shard file (a shard or a companion); the
    sizes of `ls`, `log` and `du` are read from it, so that they agree however a shard is
    shared."""

    def __init__(self, store: Store, name: str, manifests: Mapping[str, Manifest]) -> None:
        self.manifests = dict(manifests)
        # version -> (key, bytes) of each data file of its shards
        self.files = {
            version: [
                (file_key(store, name, version, s, filename), size)
                for s in m.shards
                for filename, size in data_files(s)
            ]
            for version, m in self.manifests.items()
        }
        self.listed_by: dict[Hashable, set[str]] = {}
        self.file_bytes: dict[Hashable, int] = {}
        for version, files in self.files.items():
            for key, size in files:
                self.listed_by.setdefault(key, set()).add(version)
                self.file_bytes[key] = size

    def is_shared(self, key: Hashable) -> bool:
        """Whether the file ``key`` is listed by more than one version."""
        return len(self.listed_by.get(key, ())) > 1

    def version(self, version: str) -> VersionSizes:
        """The sizes of one version."""
        files = self.files[version]
        shared = sum(size for key, size in files if self.is_shared(key))
        total = sum(size for _, size in files)
        return VersionSizes(total, total - shared, shared)


def on_disk(store: Store, path: str) -> dict[Hashable, int]:
    """Every file under ``path`` and its size, keyed as ``file_key`` keys shards (hard links: one
    entry); empty when ``path`` does not exist."""
    if is_local(store.fs):
        sizes: dict[Hashable, int] = {}
        for top, _dirs, files in os.walk(path):
            for f in files:
                try:
                    info = os.lstat(os.path.join(top, f))
                except OSError:  # removed while we walk (a gc, a build's commit)
                    continue
                if stat.S_ISREG(info.st_mode):
                    sizes[(info.st_dev, info.st_ino)] = info.st_size
        return sizes
    fs = store.fs
    try:
        found = store.remote(path, lambda: fs.find(path, detail=True))
    except FileNotFoundError:
        return {}
    return {fs._strip_protocol(p): int(info.get("size") or 0) for p, info in found.items()}


def usage(store: Store, name: str) -> dict[str, Any]:
    """A dataset's bytes (`datapipe du`), each file once: ``own`` (shard files and their
    companions one version lists), ``shared`` (those several versions list), ``stored`` (own +
    shared: the shards), ``other`` (indexes, manifests, quarantines, build states, refs, leases,
    unfinished builds) and ``disk`` (everything under the dataset's folder: stored + other);
    ``listed`` (the versions' sizes added up, as if each held a copy of its shards) and
    ``missing_files`` (shard files listed but not found: `datapipe verify` names them)."""
    versions = store.versions(name)
    sharing = Sharing(store, name, {v: store.manifest(name, v) for v in versions})
    disk = on_disk(store, store.path(name))
    own = shared = missing = 0
    for key in sharing.file_bytes:
        if key not in disk:
            missing += 1
        elif sharing.is_shared(key):
            shared += disk[key]
        else:
            own += disk[key]
    total = sum(disk.values())
    return {
        "versions": len(versions),
        "own_bytes": own,
        "shared_bytes": shared,
        "stored_bytes": own + shared,
        "other_bytes": total - own - shared,
        "disk_bytes": total,
        "listed_bytes": sum(m.bytes for m in sharing.manifests.values()),
        "missing_files": missing,
    }
