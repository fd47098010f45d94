"""What a build takes from its parent version: found before the cluster starts, asked at each pass.

``Parent`` is the dataset's latest version as the build finds it; it answers what is decided before
the source is partitioned (which source hashes to trust, the partition size, how much is left to
read). ``Parent.reuse`` is what carries over once the partitions are known: a ``Reuse`` that every
pass asks (a dedupe stage's hashes, a partition's report and rejects, a shard's file), which
answers "nothing" for a full build.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.builder.identities import Identities, with_masks
from datapipe.builder.incremental import BuildState, read_state, why_unusable
from datapipe.builder.known_hashes import trusted
from datapipe.builder.passes import Masks, Measured
from datapipe.builder.quarantine import Reject
from datapipe.builder.reject_data import InFile
from datapipe.builder.source.base import InputFile
from datapipe.versioning.manifest import ShardEntry, SourceFile, short_id
from datapipe.versioning.rejected import version_quarantine
from datapipe.versioning.store import LATEST, Store


class Reuse:
    """What the passes of a build take from its parent; this one answers "nothing" (a full build).

    ``masks``: the partition's dedupe masks so far (stage -> keep-mask), which with its source
    decide its rows (``incremental.with_masks``).
    """

    parent: str | None = None  # the version whose partitions and shards carry over

    def dedupe(self, stage: int, part: int, masks: Masks) -> np.ndarray | None:
        """The parent's row hashes of partition ``part`` at dedupe stage ``stage``."""
        return None

    def measured(self, part: int, masks: Masks) -> Measured | None:
        """The parent's measure report on partition ``part``, if it is the same partition."""
        return None

    def rejects(self, part: int, masks: Masks, key_keep: np.ndarray) -> list[Reject] | None:
        """The parent's rejects of partition ``part`` (duplicates included) when its kept keys are
        the same."""
        return None

    def reject_data(self, part: int, masks: Masks, count: int) -> InFile | None:
        """Where the data of the first ``count`` of the parent's rejects of partition ``part`` is:
        rows of its quarantine."""
        return None

    def shard(self, digest: str) -> ShardEntry | None:
        """The parent's shard of the samples of ``digest`` (``incremental.shard_digests``)."""
        return None


FULL_BUILD = Reuse()


class FromParent(Reuse):
    """The partitions and shards of a parent whose build state matches this build's."""

    def __init__(
        self,
        parent: str,
        state: BuildState,
        entries: Sequence[ShardEntry],
        raw: Sequence[str],
        quarantine: str | None = None,
    ) -> None:
        self.parent, self._state, self._raw = parent, state, list(raw)
        self._where = {identity: i for i, identity in enumerate(state.parts)}
        self._quarantine = quarantine  # the path of the parent's rejected.parquet
        # where each partition's rejects start in it: partitions in order, each's rows ascending
        self._starts = np.cumsum([0] + [len(r) for r in state.rejects])
        # the parent's shards in manifest order, by the digest of their samples
        self._by_digest = dict(zip(state.digests, entries, strict=True))

    def dedupe(self, stage: int, part: int, masks: Masks) -> np.ndarray | None:
        """The parent's row hashes of partition ``part`` at dedupe stage ``stage``."""
        return self._state.dedupe.get(stage, {}).get(with_masks(self._raw[part], masks))

    def measured(self, part: int, masks: Masks) -> Measured | None:
        """The parent's measure report on partition ``part``, if it is the same partition."""
        i = self._where.get(with_masks(self._raw[part], masks))
        return None if i is None else self._state.measured[i]

    def rejects(self, part: int, masks: Masks, key_keep: np.ndarray) -> list[Reject] | None:
        """The parent's rejects of partition ``part`` (duplicates included) when its kept keys are
        the same."""
        i = self._where.get(with_masks(self._raw[part], masks))
        if i is None or not np.array_equal(self._state.key_keep[i], key_keep):
            return None
        return list(self._state.rejects[i])

    def reject_data(self, part: int, masks: Masks, count: int) -> InFile | None:
        """Where the data of the first ``count`` of the parent's rejects of partition ``part`` is:
        rows of its quarantine."""
        if not count:
            return None
        # a partition that carries over, of a parent whose quarantine is there (``read_parent``)
        i = self._where[with_masks(self._raw[part], masks)]
        rejects = self._state.rejects[i]
        assert self._quarantine is not None
        order = np.argsort([r.row for r in rejects], kind="stable")  # as ``accounting.placed``
        rank = np.empty(len(rejects), dtype=np.int64)
        rank[order] = np.arange(len(rejects))
        return InFile(self._quarantine, self._starts[i] + rank[:count])

    def shard(self, digest: str) -> ShardEntry | None:
        """The parent's shard of the samples of ``digest`` (``incremental.shard_digests``)."""
        return self._by_digest.get(digest)


@dataclass(frozen=True)
class Parent:
    """The dataset's latest version as a build finds it: its id, its build state, and why no
    partition of it carries over (None when partitions can)."""

    version: str | None
    state: BuildState | None
    why_full: str | None

    def blocks(self) -> dict[str, str]:
        """The parent's text block digests by placed identity (``identities``), where its state
        carries over; else none."""
        return self.state.blocks if self.state and self.why_full is None else {}

    def records(self) -> dict[str, list[Any]]:
        """The parent's source hash records (``known_hashes``), or none."""
        return self.state.sources if self.state else {}

    def trusted_hashes(self, files: Sequence[InputFile], rehash: bool) -> dict[int, SourceFile]:
        """file index -> the hash the parent's records vouch for (``known_hashes.trusted``); none
        with ``rehash``."""
        return trusted(self.state.sources, files) if self.state and not rehash else {}

    def unread_bytes(
        self,
        files: Sequence[InputFile],
        known: Mapping[int, SourceFile],
        shuffled: bool,
    ) -> int | None:
        """The source bytes a rebuild must read (its files not ``known``); None for a full build,
        and for a shuffled rebuild, which rewrites every shard: a full build's write pass."""
        if self.why_full or shuffled:
            return None
        return sum(f.size for i, f in enumerate(files) if i not in known)

    def blocksize(self, fitted: int, configured: int) -> int:
        """The parent's partition size where the pipeline asks for the same one and the workers
        hold it (so that unchanged partitions match), else ``fitted``; the version is the same at
        any blocksize."""
        state = self.state if self.why_full is None else None
        usable = state is not None and state.configured_blocksize == configured
        own = state.blocksize if usable else None
        return own if own is not None and own <= fitted else fitted

    def reuse(self, store: Store, name: str, identities: Identities) -> Reuse:
        """What of the parent carries over to a build of partitions ``identities``: nothing
        (``FULL_BUILD``) when ``why_full`` says so; else its partitions that this build has and
        its shards (the source hashes are gathered now, for the identities)."""
        if self.why_full is not None or self.state is None or self.version is None:
            return FULL_BUILD
        manifest = store.manifest(name, self.version)
        quarantine = version_quarantine(store, name, manifest)
        return FromParent(self.version, self.state, manifest.shards, identities.raw(), quarantine)


def read_parent(store: Store, name: str, key: str) -> Parent:
    """The latest version of dataset ``name`` and its build state, checked against this build's
    ``key`` (``incremental.state_key``)."""
    version = store.read_ref(name, LATEST)
    if version is None:
        return Parent(None, None, "no earlier version")
    if version not in store.versions(name):
        gone = "is missing from the store (deleted or pruned)"
        return Parent(None, None, f"the latest version, {short_id(version)}, {gone}")
    path = store.build_state_path(name, version)
    if path is None:
        return Parent(version, None, "the latest version has no build state")
    state = read_state(store.fs, path)
    why = why_unusable(state, key) or _no_quarantine(store, name, version, state)
    return Parent(version, state, why)


def _no_quarantine(store: Store, name: str, version: str, state: BuildState | None) -> str | None:
    """Why ``state``'s rejects cannot carry over: their data is in the version's quarantine, and
    that is gone; None when it is there or not needed."""
    if state is None or not any(state.rejects):
        return None
    path = version_quarantine(store, name, store.manifest(name, version))
    if path is not None and store.fs.exists(path):
        return None
    return "the latest version's quarantine (rejected.parquet), which holds its rejects, is gone"
