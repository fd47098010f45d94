"""Written shards whose bytes a version of the dataset already stores, kept as that file once."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from datapipe.errors import DatapipeError
from datapipe.versioning.manifest import ShardEntry
from datapipe.versioning.store import VersionWriter

log = logging.getLogger(__name__)
READ_THREADS = 16  # manifests read at once

# a shard's content: the sha256 of its bytes, of its index and of each companion file
Content = tuple[str, str, tuple[tuple[str, str], ...]]


def content_of(entry: ShardEntry) -> Content:
    """What must be equal for a written shard to be a stored one's file: all of its files."""
    return entry.sha256, entry.index_sha256, tuple((c.suffix, c.sha256) for c in entry.companions)


def stored_shards(writer: VersionWriter) -> dict[Content, tuple[str, ShardEntry]]:
    """Every shard stored in a complete version of ``writer``'s dataset, by content: the version
    that holds it and its entry there (the parent's first, so a link goes to the newest copy)."""
    store, name = writer.store, writer.name
    versions = store.versions(name)
    if writer.parent in versions:
        versions.remove(writer.parent)
        versions.insert(0, writer.parent)
    out: dict[Content, tuple[str, ShardEntry]] = {}
    # one manifest read each, at once (object stores answer each in tens of milliseconds)
    with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="datapipe-stored") as pool:
        read = pool.map(lambda v: _shards(writer, v), versions)
        for version, shards in zip(versions, read, strict=True):
            for entry in shards:
                out.setdefault(content_of(entry), (version, entry))
    return out


def _shards(writer: VersionWriter, version: str) -> Sequence[ShardEntry]:
    """The shards of ``version`` of ``writer``'s dataset; none for a damaged one (verify names
    it)."""
    try:
        return writer.store.manifest(writer.name, version).shards
    except DatapipeError as e:
        log.warning("%s@%s: its shards are not looked at for reuse (%s)", writer.name, version, e)
        return ()


def kept_once(
    writer: VersionWriter,
    stored: Mapping[Content, tuple[str, ShardEntry]],
    results: Mapping[int, tuple[ShardEntry, bool]],
) -> tuple[dict[int, ShardEntry], list[int]]:
    """Of the shards of the write pass (shard number -> entry, whether it was written), those whose
    bytes and index equal a ``stored`` shard of the dataset, each now that file (``store_as``): a
    dataset stores a shard once, however its samples were found to be the same. And the shards
    left unwritten that could not be kept so (their stored file gone meanwhile): to write."""
    kept, unwritten = {}, []
    for s, (entry, written) in results.items():
        found = stored.get(content_of(entry))
        try:
            if found is not None:
                version, same = found
                linked = writer.store_as(version, same, entry.path, written)
                kept[s] = replace(linked, split=entry.split)
                continue
        except (DatapipeError, OSError) as e:  # gone meanwhile, or no links here: keep a copy
            if written:
                log.warning("%s: kept as written, not as %s's file (%s)", entry.path, version, e)
        if not written:
            unwritten.append(s)
    return kept, unwritten
