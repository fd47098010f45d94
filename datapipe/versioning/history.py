"""A dataset's history (`datapipe log`): versions newest first, what each changed against its
parent, and sizes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from datapipe.errors import DatapipeError, NotFoundError
from datapipe.storage.fs import read_bytes
from datapipe.versioning.layout import LATEST, VERSIONS
from datapipe.versioning.leases import held_versions
from datapipe.versioning.manifest import Manifest, short_id
from datapipe.versioning.rebuild_report import lineage_changes
from datapipe.versioning.retention import PRUNED_NAME, newest_first
from datapipe.versioning.sample_diff import Side, VersionPair
from datapipe.versioning.sizes import Sharing
from datapipe.versioning.sizes import usage as usage  # where callers found it first
from datapipe.versioning.store import Store


@dataclass
class Entry:
    """One version in the history; ``parent_state``: 'present', 'pruned' (gc deleted it) or None (no
    parent)."""

    version: str
    created_at: str
    samples: int
    bytes: int
    own_bytes: int  # in files no other version lists
    shared_bytes: int  # in files stored once for this version and others (versioning/sizes.py)
    parent: str | None
    parent_state: str | None
    reachable: bool  # on the parent chain from latest
    tags: list[str] = field(default_factory=list)
    leases: list[str] = field(default_factory=list)
    # against the parent: added, removed, changed, unchanged (and tokens_added, tokens_removed
    # between token versions)
    changes: dict[str, Any] | None = None
    splits: dict[str, dict[str, Any]] = field(default_factory=dict)
    # lineage inputs that changed against the parent
    lineage: list[str] = field(default_factory=list)


def _counts(d: Any) -> dict[str, int]:
    return {
        "added": len(d.added),
        "removed": len(d.removed),
        "changed": len(d.changed),
        "unchanged": d.unchanged,
    }


def pruned_summary(store: Store, name: str, version: str) -> dict[str, Any] | None:
    """What pruned.json records of a pruned version that still holds shared files; None when there
    is none."""
    try:
        return json.loads(
            read_bytes(store.fs, store.path(name, VERSIONS, version, PRUNED_NAME), store.retry)
        )
    except (NotFoundError, ValueError):
        return None


# against the parent: counts, and per split
Changes = tuple[dict[str, int], dict[str, dict[str, int]]]


def history(
    store: Store, name: str, changes: dict[tuple[str, str], Changes] | None = None
) -> tuple[list[Entry], list[str]]:
    """The versions of ``name``, newest first along the parent chain from ``latest``, then the
    versions not on it (newest first); and the problems found (a ref naming a missing version, a
    damaged lease file).

    ``changes``: a cache of what each (parent, version) pair changed, kept by a caller that asks
    again (the browser): versions are immutable, so a pair's counts never go stale; tags and leases
    are read each time."""
    changes = {} if changes is None else changes
    manifests = {v: store.manifest(name, v) for v in store.versions(name)}
    tags, problems = _tags(store, name, manifests)
    held, damaged = held_versions(store, name)
    problems += [str(d) for d in damaged]
    chain, at = [], store.read_ref(name, LATEST)
    while at in manifests and at not in chain:
        chain.append(at)
        at = manifests[at].parent
    rest = [v for v in newest_first(manifests) if v not in chain]
    entries, sharing = [], Sharing(store, name, manifests)
    for version in chain + rest:
        m, sizes = manifests[version], sharing.version(version)
        entry = Entry(
            version,
            m.created_at,
            m.samples,
            m.bytes,
            sizes.own_bytes,
            sizes.shared_bytes,
            m.parent,
            None if m.parent is None else "present" if m.parent in manifests else "pruned",
            version in chain,
            tags.get(version, []),
            [lease.id for lease in held.get(version, [])],
        )
        if entry.parent_state == "present":
            pair = (m.parent, version)
            if pair not in changes:
                try:
                    changes[pair] = _changes(store, name, manifests[m.parent], m)
                except DatapipeError as e:  # a damaged index: say so, keep going
                    problems.append(
                        f"{name}@{short_id(version)}: cannot compare with its parent: {e}"
                    )
            if pair in changes:
                entry.changes, entry.splits = changes[pair]
            entry.lineage = lineage_changes(manifests[m.parent], m)
        entries.append(entry)
    return entries, problems


def _tags(
    store: Store, name: str, manifests: dict[str, Manifest]
) -> tuple[dict[str, list[str]], list[str]]:
    """Version -> the refs naming it; and a problem for each ref naming a version that is
    missing."""
    problems = []
    tags: dict[str, list[str]] = {}
    for ref, version in sorted(store.refs(name).items()):
        if version not in manifests:
            problems.append(
                f"ref {ref} names version {version}, which is missing (deleted, or "
                "never committed); "
                f"point it elsewhere with `datapipe tag {store.url}/{name}@VERSION {ref}`"
            )
        else:
            tags.setdefault(version, []).append(ref)
    return tags, problems


def _changes(store: Store, name: str, parent: Manifest, manifest: Manifest) -> Changes:
    """What ``manifest`` changed against ``parent``: the counts, and per split."""
    versions = VersionPair(Side(store, name, parent), Side(store, name, manifest))
    counts, tokens = _counts(versions.diff()), versions.tokens()
    if tokens is not None:  # token versions: their documents' tokens too
        counts.update(tokens_added=tokens.tokens_added, tokens_removed=tokens.tokens_removed)
    return counts, {s: _counts(d) for s, d in versions.splits().items()}


def as_json(entry: Entry) -> dict[str, Any]:
    """The entry as `datapipe log --json` prints it."""
    return dict(vars(entry))
