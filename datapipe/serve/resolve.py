"""Path parameters checked against the store: names from its listing, versions through its refs,
shard numbers from the manifest; nothing from a URL ever becomes a file path."""

from __future__ import annotations

import threading
from typing import Any

from datapipe.errors import NotFoundError
from datapipe.loader.dataset import Dataset
from datapipe.versioning.manifest import short_id
from datapipe.versioning.store import Store


class Versions:
    """The store a server browses, and the versions it has opened (one Dataset per version, no
    lease: read-only)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._open: dict[tuple[str, str], Dataset] = {}
        self._lock = threading.Lock()  # pages run on several threads
        # (parent, version) -> what changed: versions are immutable
        self.changes: dict[tuple[str, str], Any] = {}

    def dataset_name(self, name: str) -> str:
        """``name`` when the store lists it, else NotFoundError (so '..', '/x', NUL bytes never
        reach a path)."""
        if name not in self.store.datasets():
            raise NotFoundError(f"no dataset {name!r} in {self.store.url}")
        return name

    def version(self, name: str, ref: str) -> str:
        """The version id a tag, 'latest' or a unique hex prefix names, checked against the store's
        listing."""
        name = self.dataset_name(name)
        version = self.store.resolve(name, ref)
        if version not in self.store.versions(name):
            raise NotFoundError(
                f"{self.store.url}/{name}@{ref}: names {version!r}, which is not a complete version"
            )
        return version

    def dataset(self, name: str, ref: str) -> Dataset:
        """NAME@REF opened for random access (kept open for later requests)."""
        version = self.version(name, ref)
        key = (name, version)
        with self._lock:
            opened = self._open.get(key)
        if opened is None:
            opened = Dataset(self.store, name, self.store.manifest(name, version))
            # two pages that opened it at once keep the first; the other was never read
            with self._lock:
                opened = self._open.setdefault(key, opened)
        return opened

    def shard(self, ds: Dataset, shard: int) -> int:
        """``shard`` when the manifest has it, else NotFoundError."""
        if not 0 <= shard < len(ds.shards):
            raise NotFoundError(
                f"{ds.name}@{short_id(ds.version)} has no shard {shard} ({len(ds.shards)} shards)"
            )
        return shard

    def close(self) -> None:
        """Close every opened version."""
        with self._lock:
            opened, self._open = list(self._open.values()), {}
        for ds in opened:
            ds.close()
