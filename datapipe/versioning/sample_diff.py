"""The sample diff of two versions (`datapipe diff`): keys added, removed and changed, by the hashes in the indexes."""

from __future__ import annotations

from dataclasses import dataclass, field

from datapipe.formats.index import ShardIndex
from datapipe.storage.fs import read_bytes
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store


@dataclass(frozen=True)
class VersionDiff:
    """Keys added, removed and changed (same key, other content) from version a to version b."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: int = 0


def sample_hashes(store: Store, name: str, manifest: Manifest, split: str | None = None) -> dict[str, bytes]:
    """key -> sha256 of the sample's bytes, over every shard of a version (of ``split`` only, when given)."""
    out: dict[str, bytes] = {}
    for shard in manifest.shards:
        if split is not None and shard.split != split:
            continue
        path = store.shard_file(name, manifest.version, shard, index=True)
        index = ShardIndex.from_bytes(read_bytes(store.fs, path), path)
        out.update(zip(index.keys(), (h.tobytes() for h in index.sample_hash), strict=True))
    return out


def sample_locations(store: Store, name: str, manifest: Manifest) -> dict[str, tuple[str, int, bytes]]:
    """key -> (shard path in the version, position in that shard, sha256 of the sample's bytes)."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for shard in manifest.shards:
        path = store.shard_file(name, manifest.version, shard, index=True)
        index = ShardIndex.from_bytes(read_bytes(store.fs, path), path)
        for i, (key, digest) in enumerate(zip(index.keys(), index.sample_hash, strict=True)):
            out[key] = (shard.path, i, digest.tobytes())
    return out


def split_hashes(store: Store, name: str, manifest: Manifest) -> dict[str, dict[str, bytes]]:
    """Per split of a version, key -> sha256 of the sample's bytes (empty for a version without splits)."""
    if manifest.splits is None:
        return {}
    return {split: sample_hashes(store, name, manifest, split) for split in manifest.splits.names}


def diff_splits(a: dict[str, dict[str, bytes]], b: dict[str, dict[str, bytes]]) -> dict[str, VersionDiff]:
    """Per split either version has, the difference of its samples (a split one version lacks is empty there)."""
    return {split: diff_versions(a.get(split, {}), b.get(split, {})) for split in sorted(a.keys() | b.keys())}


def diff_versions(a: dict[str, bytes], b: dict[str, bytes]) -> VersionDiff:
    """The difference between two key -> hash maps."""
    common = a.keys() & b.keys()
    changed = sorted(k for k in common if a[k] != b[k])
    return VersionDiff(
        added=sorted(b.keys() - a.keys()), removed=sorted(a.keys() - b.keys()),
        changed=changed, unchanged=len(common) - len(changed),
    )
