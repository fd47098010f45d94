"""Retention: which complete versions `gc` deletes (--prune, --keep-last, --keep-within) and how,
keeping shared files.

A version is kept when a ref names it (``latest``, a tag), a lease holds it, or it is among the
``keep_last`` newest or created within ``keep_within``; with ``prune`` alone only the first two keep
one.
A deleted version's files that a kept version lists (``stored_in``) stay: its directory keeps them
and a ``pruned.json`` marker (the version's summary), and the manifest goes. Such a directory goes
at a later gc, once no kept version lists its files.

Crash and race safety, in this order: the marker is written, then the manifest deleted (the version
is no more complete: a new lease on it fails), then leases and complete versions are read again; a
version leased meanwhile gets its manifest back, and files a version committed meanwhile lists are
kept. Only then are files deleted. A crash leaves either a complete version with a stale marker
(removed by the next gc that keeps it) or a pruned directory that the next gc finishes.
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass, field

from datapipe.storage.fs import put_atomic, read_bytes
from datapipe.versioning.layout import VERSIONS
from datapipe.versioning.leases import Damaged, held_versions
from datapipe.versioning.manifest import MANIFEST_NAME, Manifest
from datapipe.versioning.store import Store

PRUNED_NAME = "pruned.json"


@dataclass
class Doomed:
    """A version (or a pruned directory) to delete: the files that go, and those kept because kept
    versions share them."""

    version: str
    pruned_before: bool  # already a pruned directory (no manifest)
    delete: dict[str, int] = field(default_factory=dict)  # file name -> bytes
    kept: dict[str, int] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)  # what pruned.json records
    restored: bool = False  # leased while gc ran: its manifest came back

    @property
    def bytes(self) -> int:
        """Bytes freed."""
        return sum(self.delete.values())


@dataclass
class RetentionPlan:
    """The versions kept (each with why) and those deleted; damaged lease files seen."""

    kept: dict[str, list[str]] = field(default_factory=dict)
    doomed: list[Doomed] = field(default_factory=list)
    damaged: list[Damaged] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        """Bytes freed in all."""
        return sum(d.bytes for d in self.doomed if not d.restored)


def _created(m: Manifest) -> float:
    try:
        return datetime.datetime.fromisoformat(m.created_at).timestamp()
    except ValueError:
        return 0.0


def newest_first(manifests: dict[str, Manifest]) -> list[str]:
    """Version ids by creation time, newest first; within one second a child before its parent."""
    depth: dict[str, int] = {}

    def depth_of(version: str) -> int:
        if version not in depth:
            depth[version] = 0  # a cycle (a damaged store) ends here
            parent = manifests[version].parent
            depth[version] = depth_of(parent) + 1 if parent in manifests else 0
        return depth[version]

    return sorted(manifests, key=lambda v: (_created(manifests[v]), depth_of(v), v), reverse=True)


def listed_files(store: Store, name: str, manifests: dict[str, Manifest]) -> set[tuple[str, str]]:
    """(directory's version, file name) of every shard, index, companion and quarantine file the
    manifests list."""
    out = set()
    for version, m in manifests.items():
        for s in m.shards:
            out.update((s.stored_in or version, stored) for stored in s.stored_files())
        if m.rejected:
            out.add((version, m.rejected))
    return out


def pruned_directories(store: Store, name: str, complete: set[str]) -> list[str]:
    """Version directories holding only files other versions share: a marker, no manifest."""
    out = []
    for entry in store.entry_names(store.path(name, VERSIONS)):
        if entry.startswith(".") or entry in complete:
            continue
        marker = store.path(name, VERSIONS, entry, PRUNED_NAME)
        if store.remote(marker, lambda m=marker: store.fs.exists(m)):
            out.append(entry)
    return out


def _files(store: Store, name: str, version: str) -> dict[str, int]:
    root = store.path(name, VERSIONS, version)
    found = store.remote(root, lambda: store.fs.find(root, detail=True))
    return {p.rsplit("/", 1)[-1]: int(info["size"]) for p, info in found.items()}


def plan_retention(
    store: Store,
    name: str,
    *,
    prune: bool = False,
    keep_last: int | None = None,
    keep_within: float | None = None,
    now: float | None = None,
) -> RetentionPlan:
    """What gc would delete; nothing is changed."""
    now = time.time() if now is None else now
    manifests = {v: store.manifest(name, v) for v in store.versions(name)}
    held, damaged = held_versions(store, name, now)
    plan = RetentionPlan(damaged=damaged)
    reasons: dict[str, list[str]] = {v: [] for v in manifests}
    for ref, version in store.refs(name).items():
        if version in reasons:
            reasons[version].append(ref if ref == "latest" else f"tag {ref}")
    for version, leases in held.items():
        if version in reasons:
            reasons[version].append("leased " + ",".join(lease.id for lease in leases))
    newest = newest_first(manifests)
    if keep_last is not None:
        for version in newest[:keep_last]:
            reasons[version].append(f"last {keep_last}")
    if keep_within is not None:
        for version in newest:
            if now - _created(manifests[version]) <= keep_within:
                reasons[version].append("within")
    if not (prune or keep_last is not None or keep_within is not None):
        reasons = {v: r or ["no retention asked"] for v, r in reasons.items()}
    plan.kept = {v: r for v, r in reasons.items() if r}
    referenced = listed_files(store, name, {v: manifests[v] for v in plan.kept})
    for version in newest:
        if version in plan.kept:
            continue
        m = manifests[version]
        summary = {
            "version": version,
            "parent": m.parent,
            "created_at": m.created_at,
            "samples": m.samples,
            "bytes": m.bytes,
            "pruned_at": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat(
                timespec="seconds"
            ),
        }
        plan.doomed.append(
            _split(
                Doomed(version, False, summary=summary), _files(store, name, version), referenced
            )
        )
    for version in pruned_directories(store, name, set(manifests)):
        plan.doomed.append(_split(Doomed(version, True), _files(store, name, version), referenced))
    return plan


def _split(doomed: Doomed, files: dict[str, int], referenced: set[tuple[str, str]]) -> Doomed:
    doomed.delete, doomed.kept = {}, {}
    for filename, size in files.items():
        if filename in (MANIFEST_NAME, PRUNED_NAME):
            continue
        (doomed.kept if (doomed.version, filename) in referenced else doomed.delete)[filename] = (
            size
        )
    return doomed


def apply_retention(store: Store, name: str, plan: RetentionPlan) -> list[str]:
    """Delete what ``plan`` dooms, safely against readers and builds running meanwhile; the paths
    removed."""
    fs, removed = store.fs, []
    originals: dict[str, bytes] = {}
    for d in plan.doomed:
        if d.pruned_before:
            continue
        root = store.path(name, VERSIONS, d.version)
        originals[d.version] = read_bytes(fs, f"{root}/{MANIFEST_NAME}", store.retry)
        marker, manifest = f"{root}/{PRUNED_NAME}", f"{root}/{MANIFEST_NAME}"
        store.remote(
            marker,
            lambda m=marker, s=d.summary: put_atomic(fs, m, json.dumps(s, indent=1).encode()),
        )
        store.remote(manifest, lambda m=manifest: fs.rm_file(m))
    # what changed while the manifests went: leases taken, versions committed
    held, _ = held_versions(store, name)
    complete = {v: store.manifest(name, v) for v in store.versions(name)}
    referenced = listed_files(store, name, complete)
    for d in plan.doomed:
        root = store.path(name, VERSIONS, d.version)
        if d.version in held and d.version in originals:
            where = f"{root}/{MANIFEST_NAME}"
            store.remote(where, lambda w=where, b=originals[d.version]: put_atomic(fs, w, b))
            store.remote(root, lambda r=root: fs.rm_file(f"{r}/{PRUNED_NAME}"))
            d.restored = True
            continue
        _split(d, {**d.delete, **d.kept}, referenced)
        if not d.kept:
            store.remote(root, lambda r=root: fs.rm(r, recursive=True))
            removed.append(root)
            continue
        for filename in d.delete:
            path = f"{root}/{filename}"
            store.remote(path, lambda p=path: fs.rm_file(p))
            removed.append(path)
    return removed
