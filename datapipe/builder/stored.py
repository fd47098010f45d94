"""Written shards whose bytes a version of the dataset already stores, kept as that file once."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from datapipe.errors import DatapipeError
from datapipe.versioning.manifest import ShardEntry
from datapipe.versioning.store import VersionWriter

log = logging.getLogger(__name__)

# a shard's content: the sha256 of its bytes and of its index
Content = tuple[str, str]


def stored_shards(writer: VersionWriter) -> dict[Content, tuple[str, ShardEntry]]:
    """Every shard stored in a complete version of ``writer``'s dataset, by content: the version
    that holds it and its entry there (the parent's first, so a link goes to the newest copy)."""
    store, name = writer.store, writer.name
    versions = store.versions(name)
    if writer.parent in versions:
        versions.remove(writer.parent)
        versions.insert(0, writer.parent)
    out: dict[Content, tuple[str, ShardEntry]] = {}
    for version in versions:
        try:
            shards = store.manifest(name, version).shards
        except DatapipeError as e:  # a damaged version shares nothing; verify names it
            log.warning("%s@%s: its shards are not looked at for reuse (%s)", name, version, e)
            continue
        for entry in shards:
            out.setdefault((entry.sha256, entry.index_sha256), (version, entry))
    return out


def kept_once(writer: VersionWriter, written: Mapping[int, ShardEntry]) -> dict[int, ShardEntry]:
    """Of the shards just ``written`` into ``writer``'s version (shard number -> entry), those whose
    bytes and index equal a stored shard of the dataset, each now that file (``store_as``): a
    dataset stores a shard once, however its samples were found to be the same."""
    if not written:
        return {}
    stored = stored_shards(writer)
    out = {}
    for s, entry in written.items():
        found = stored.get((entry.sha256, entry.index_sha256))
        if found is None:
            continue
        version, same = found
        try:
            out[s] = replace(writer.store_as(version, same, entry.path), split=entry.split)
        except (DatapipeError, OSError) as e:  # gone meanwhile, or no links here: keep the copy
            log.warning("%s: kept as written, not as %s's file (%s)", entry.path, version, e)
    return out
