"""The sample diff of two versions (`datapipe diff`): keys added, removed and changed, by the hashes
in the indexes.

Two versions often share most shards (an incremental build reuses its parent's). A shard with the
same sha256 and split in both holds the same samples in both, and a key is in one shard of a
version, so the keys of the shards only one side has are the only ones that can differ:
``VersionPair`` reads those shards' indexes only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from datapipe.formats.index import ShardIndex
from datapipe.storage.fs import read_bytes
from datapipe.versioning.manifest import Manifest, ShardEntry
from datapipe.versioning.store import Store
from datapipe.versioning.token_stats import is_token_version, shard_megatron_index


@dataclass(frozen=True)
class VersionDiff:
    """Keys added, removed and changed (same key, other content) from version a to version b."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: int = 0


@dataclass(frozen=True)
class TokenChanges:
    """Documents and tokens added and removed from token version a to b. A changed document
    counts its old tokens as removed and its new ones as added, so that b's tokens are a's plus
    ``tokens_added`` minus ``tokens_removed``."""

    documents_added: int
    documents_removed: int
    tokens_added: int
    tokens_removed: int


def sample_hashes(
    store: Store,
    name: str,
    manifest: Manifest,
    split: str | None = None,
    shards: Sequence[ShardEntry] | None = None,
) -> dict[str, bytes]:
    """key -> sha256 of the sample's bytes, over every shard of a version (of ``split`` only, when
    given; of ``shards`` only, when given)."""
    return {
        key: digest
        for key, (_, _, digest) in sample_locations(store, name, manifest, split, shards).items()
    }


def sample_locations(
    store: Store,
    name: str,
    manifest: Manifest,
    split: str | None = None,
    shards: Sequence[ShardEntry] | None = None,
) -> dict[str, tuple[str, int, bytes]]:
    """key -> (shard path in the version, position in that shard, sha256 of the sample's bytes),
    over the version's shards (of ``split``, of ``shards``, when given)."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for shard in manifest.shards if shards is None else shards:
        if split is not None and shard.split != split:
            continue
        path = store.shard_file(name, manifest.version, shard, index=True)
        index = ShardIndex.from_bytes(read_bytes(store.fs, path), path)
        for i, (key, digest) in enumerate(zip(index.keys(), index.sample_hash, strict=True)):
            out[key] = (shard.path, i, digest.tobytes())
    return out


def _unshared(
    a: Manifest, b: Manifest
) -> tuple[list[ShardEntry], list[ShardEntry], Counter[str | None]]:
    """The shards of ``a`` and of ``b`` that the other lacks (by sha256 and split), and the samples
    of the shared ones per split."""
    left = Counter((e.sha256, e.split) for e in b.shards)
    only_a, shared = [], Counter()
    for entry in a.shards:
        if left[entry.sha256, entry.split] > 0:
            left[entry.sha256, entry.split] -= 1
            shared[entry.split] += entry.samples
        else:
            only_a.append(entry)
    right = Counter((e.sha256, e.split) for e in a.shards)
    only_b = []
    for entry in b.shards:
        if right[entry.sha256, entry.split] > 0:
            right[entry.sha256, entry.split] -= 1
        else:
            only_b.append(entry)
    return only_a, only_b, shared


@dataclass(frozen=True)
class Side:
    """One version of a pair: where it is and its manifest."""

    store: Store
    name: str
    manifest: Manifest


class VersionPair:
    """The sample diff of version ``a`` to ``b``, from the indexes of the shards they do not share
    (read once)."""

    def __init__(self, a: Side, b: Side) -> None:
        self.a, self.b = a, b
        self.only_a, self.only_b, self.shared = _unshared(a.manifest, b.manifest)
        self._locations: tuple[dict[str, tuple[str, int, bytes]], ...] | None = None

    def locations(self) -> tuple[dict[str, tuple[str, int, bytes]], ...]:
        """Each side's ``sample_locations`` over its unshared shards."""
        if self._locations is None:
            self._locations = tuple(
                sample_locations(s.store, s.name, s.manifest, shards=only)
                for s, only in ((self.a, self.only_a), (self.b, self.only_b))
            )
        return self._locations

    def diff(self) -> VersionDiff:
        """Keys added, removed and changed; the shared shards' samples count as unchanged."""
        a, b = ({k: h for k, (_, _, h) in side.items()} for side in self.locations())
        return _with_shared(diff_versions(a, b), sum(self.shared.values()))

    def tokens(self) -> TokenChanges | None:
        """Documents and tokens added and removed, when both are token versions (else None): the
        lengths from the unshared shards' Megatron ``.idx`` files, whose documents are the only
        ones that can differ."""
        if not (is_token_version(self.a.manifest) and is_token_version(self.b.manifest)):
            return None
        d = self.diff()
        (in_a, in_b), lengths = self.locations(), []
        for side, only in ((self.a, self.only_a), (self.b, self.only_b)):
            version = side.manifest.version
            lengths.append(
                {
                    e.path: shard_megatron_index(side.store, side.name, version, e).lengths
                    for e in only
                }
            )

        def total(where: dict[str, tuple[str, int, bytes]], side: int, keys: list[str]) -> int:
            return sum(int(lengths[side][where[k][0]][where[k][1]]) for k in keys)

        return TokenChanges(
            len(d.added),
            len(d.removed),
            total(in_b, 1, d.added + d.changed),
            total(in_a, 0, d.removed + d.changed),
        )

    def splits(self) -> dict[str, VersionDiff]:
        """Per split either version has, its diff (a split one version lacks is empty there); {}
        when neither has splits."""
        names = _split_names(self.a.manifest) | _split_names(self.b.manifest)
        by_split: list[dict[str | None, dict[str, bytes]]] = []
        for side, only in zip(self.locations(), (self.only_a, self.only_b), strict=True):
            split_of = {e.path: e.split for e in only}
            grouped: dict[str | None, dict[str, bytes]] = {}
            for key, (path, _, digest) in side.items():
                grouped.setdefault(split_of[path], {})[key] = digest
            by_split.append(grouped)
        return {
            split: _with_shared(
                diff_versions(by_split[0].get(split, {}), by_split[1].get(split, {})),
                self.shared[split],
            )
            for split in sorted(names)
        }


def _with_shared(d: VersionDiff, shared: int) -> VersionDiff:
    return replace(d, unchanged=d.unchanged + shared)


def _split_names(m: Manifest) -> set[str]:
    return set(m.splits.names) if m.splits is not None else set()


def diff_versions(a: dict[str, bytes], b: dict[str, bytes]) -> VersionDiff:
    """The difference between two key -> hash maps."""
    common = a.keys() & b.keys()
    changed = sorted(k for k in common if a[k] != b[k])
    return VersionDiff(
        added=sorted(b.keys() - a.keys()),
        removed=sorted(a.keys() - b.keys()),
        changed=changed,
        unchanged=len(common) - len(changed),
    )
