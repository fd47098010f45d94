"""Partition identities: what an incremental build matches against its parent's partitions.

A partition is placed (``placed_identities``: its files' content hashes and where in them it lies),
except a byte block of a CSV or JSON lines file, which is parsed from its bytes alone
(``SourceFormat.parsed_bytes``): its identity is their digest, so an append to one file leaves all
but its last blocks as they were, and an edit the blocks away from it. The state keeps each block's
digest under its placed identity, so a rebuild reads for their digests only the blocks of files
whose hash changed or that its parent did not have.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from datapipe.builder.lineage import HASH_GROUP_BYTES, HASH_GROUP_FILES, hash_source
from datapipe.builder.removals import Removal
from datapipe.builder.shard_plan import Dedupe
from datapipe.builder.source.base import Part, Source
from datapipe.builder.source.registry import get_source_format
from datapipe.versioning.manifest import SourceFile, canonical_json


def placed_identity(part: Part, files: Mapping[int, SourceFile] | Sequence[SourceFile]) -> str:
    """A digest of ``part``'s files (name and content hash: a 'files' or class-folders row holds
    its path) and where in them it lies; ``files``: by file index."""
    hashes = [(files[i].path, files[i].hash) for i in (part.members or (part.file,))]
    return hashlib.blake2b(
        canonical_json([hashes, part.start, part.length, part.row_group, part.exact]),
        digest_size=16,
    ).hexdigest()


def with_masks(identity: str, masks: Mapping[int, Any]) -> str:
    """A partition's identity once dedupe stages chose its rows: its rows, and so every later report
    on it and the numbering of its samples, depend on the masks too (a row dropped as a duplicate of
    a new partition's)."""
    if not masks:
        return identity
    h = hashlib.blake2b(bytes.fromhex(identity), digest_size=16)
    for stage in sorted(masks):
        value = masks[stage]
        mask = np.asarray(getattr(value, "keep", value), dtype=bool)
        h.update(f"{stage}:{len(mask)}:".encode() + np.packbits(mask).tobytes())
        if isinstance(value, Removal):  # its reasons name kept documents: the quarantine's rows
            h.update(value.digest_bytes())
    return h.hexdigest()


def block_digests(source: Source, parts: Sequence[Part]) -> list[str | None]:
    """Per part, the digest of the bytes it is parsed from, or None where its format has none (a
    task: a group of parts, ``_groups``)."""
    fmt = get_source_format(source.format)
    out: list[str | None] = []
    for part in parts:
        data = fmt.parsed_bytes(source, part)
        if data is None:
            out.append(None)
            continue
        # "block:" keeps these apart from placed identities, which hash a JSON list
        h = hashlib.blake2b(b"block:", digest_size=16)
        h.update(data)
        out.append(h.hexdigest())
    return out


def is_block(part: Part) -> bool:
    """Whether ``part`` is a byte block of a text file (not a whole file, row group or group)."""
    return part.length is not None and part.row_group is None and not part.members


class BlockDigests:
    """Every text block's digest: the parent's (``known``: placed identity -> digest) where its
    file's hash is known unread (unchanged and stamped, or an object's etag), the rest from tasks on
    ``client`` (``_groups``), started now and gathered when first asked for."""

    def __init__(
        self,
        client: Any,
        source: Source,
        known_hashes: Mapping[int, SourceFile],
        known: Mapping[str, str],
    ) -> None:
        from dask import delayed

        self.client, self._parts = client, source.parts
        self._found: dict[int, str] = {}
        todo: list[Part] = []
        unread: dict[int, SourceFile | None] = {}
        for p in filter(is_block, source.parts):
            if p.file not in unread:
                unread[p.file] = _hash_unread(source, p.file, known_hashes)
            digest = None if unread[p.file] is None else known.get(placed_identity(p, unread))
            if digest is None:
                todo.append(p)
            else:
                self._found[p.number] = digest
        task, bare = delayed(block_digests, pure=False), replace(source, parts=())
        self._todo = _groups(todo)
        self._pending = client.compute([task(bare, ps) for ps in self._todo]) if todo else []
        self._all: list[str | None] | None = None

    def all(self) -> list[str | None]:
        """Per partition, its block digest; None for a partition that is not a text block."""
        if self._all is None:
            for parts, digests in zip(self._todo, self.client.gather(self._pending), strict=True):
                self._found.update((p.number, d) for p, d in zip(parts, digests, strict=True) if d)
            self._all = [self._found.get(p.number) for p in self._parts]
        return self._all


def _groups(parts: Sequence[Part]) -> list[list[Part]]:
    """``parts`` in runs of at most HASH_GROUP_FILES blocks and HASH_GROUP_BYTES nominal bytes, a
    task each: a scheduler spends about a millisecond a task, and a large file is read by many."""
    groups: list[list[Part]] = [[]]
    size = 0
    for p in parts:
        length = p.length or 0
        if groups[-1] and (size + length > HASH_GROUP_BYTES or len(groups[-1]) >= HASH_GROUP_FILES):
            groups.append([])
            size = 0
        groups[-1].append(p)
        size += length
    return [g for g in groups if g]


def _hash_unread(source: Source, i: int, known: Mapping[int, SourceFile]) -> SourceFile | None:
    """File ``i``'s hash where it is known without reading the file: vouched for by the parent's
    records, or an object's etag; else None."""
    if i in known:
        return known[i]
    f = source.files[i]
    return hash_source(source.fs, f) if f.etag else None


class Identities:
    """Per partition, its identity (its block digest, else its placed one), and with the dedupe
    masks that chose its rows (``with_masks``).

    The source hashes and block digests are gathered the first time an identity is asked for: a
    rebuild asks when it looks for its parent's partitions, a full build only when it plans its
    shards, so that its files are read beside its passes.
    """

    def __init__(
        self,
        parts: Sequence[Part],
        hashes: Callable[[], Sequence[SourceFile]],
        blocks: Callable[[], Sequence[str | None]],
    ) -> None:
        self._parts, self._hashes, self._blocks = parts, hashes, blocks
        self._raw: list[str] | None = None
        self._placed: list[str] | None = None

    def raw(self) -> list[str]:
        """Per partition, its identity before any dedupe stage."""
        if self._raw is None:
            files = self._hashes()
            self._placed = [placed_identity(p, files) for p in self._parts]
            blocks = self._blocks()
            self._raw = [b or p for p, b in zip(self._placed, blocks, strict=True)]
        return self._raw

    def blocks(self) -> dict[str, str]:
        """Placed identity -> block digest of each text block, for the next build's state."""
        raw = self.raw()
        assert self._placed is not None
        return {p: r for p, r in zip(self._placed, raw, strict=True) if p != r}

    def at(self, dedupe: Dedupe, before: int | None = None) -> list[str]:
        """Per partition, its identity with the masks of the dedupe stages before ``before`` (all
        of them when None)."""
        return [
            with_masks(raw, dedupe.of(p.number, before))
            for raw, p in zip(self.raw(), self._parts, strict=True)
        ]
