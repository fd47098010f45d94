"""The documents of other versions a near_dedupe stage checks against (``against``): found on
the client, so that a missing one fails before any pass; taken from the version's build state
where its signatures are this stage's (``against_state``), else signed shard by shard on the
workers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.builder.config_parts import NearDedupeArgs
from datapipe.builder.near_dedupe.against_state import FromState, signed_from_state
from datapipe.builder.near_dedupe.minhash import HashFamily, signatures
from datapipe.builder.removals import Signed
from datapipe.errors import ConfigError, DatapipeError, did_you_mean
from datapipe.formats.shards import read_shard_from
from datapipe.versioning.layout import parse_dataset_url
from datapipe.versioning.manifest import ShardEntry
from datapipe.versioning.store import Store

KEY = "__key__"


@dataclass(frozen=True)
class AgainstShard:
    """One shard of a version checked against: where it is, and the name its documents go by
    (``URL@VERSION``)."""

    store_url: str
    storage_options: Mapping[str, Any]
    name: str
    version: str
    entry: ShardEntry
    shard_format: str
    label: str


@dataclass(frozen=True)
class Against:
    """What a near_dedupe stage checks against: blocks of documents (shards to sign, or documents
    signed already in a version's build state), and a summary line per version."""

    blocks: list[AgainstShard | FromState]
    notes: list[str]


def against_blocks(stage: str, args: NearDedupeArgs, store: Store) -> Against:
    """The documents of the versions ``args.against`` names, in their order; a ConfigError names a
    version that is not there or that has no ``args.field``."""
    blocks: list[AgainstShard | FromState] = []
    notes: list[str] = []
    for i, url in enumerate(args.against):
        where = f"{stage}.against[{i}]"
        try:
            store_url, name, ref = parse_dataset_url(url)
            other = Store(store_url, store.storage_options)
            version = other.resolve(name, ref)
            manifest = other.manifest(name, version)
        except DatapipeError as e:
            raise ConfigError(
                f"{where}: {url!r} cannot be read ({e}); name a built version as "
                "STORE/NAME[@REF], e.g. storage/evalset@latest"
            ) from None
        if args.field not in manifest.fields:
            raise ConfigError(
                f"{where}: {url} has no field {args.field!r}"
                f"{did_you_mean([args.field], manifest.fields)} (fields: "
                f"{', '.join(manifest.fields)}); near_dedupe.field names the text in both"
            )
        label = f"{url.split('@')[0]}@{version[:12]}"
        documents = sum(e.samples for e in manifest.shards)
        head = f"{stage}: checked against {label} ({documents} documents, "
        signed, why = signed_from_state(other, name, manifest, args, label)
        if why is None:
            blocks += signed
            notes.append(head + "signatures from its build state)")
            continue
        blocks += [
            AgainstShard(
                store_url, store.storage_options, name, version, e, manifest.shard_format, label
            )
            for e in manifest.shards
        ]
        notes.append(
            head + f"signed from its shards with shingle {args.shingle}, {args.hashes} hashes, "
            f"seed {args.seed}: {why})"
        )
    return Against(blocks, notes)


def against_task(shard: AgainstShard, args: NearDedupeArgs) -> Signed:
    """The signatures of one shard's documents, labelled URL@VERSION#KEY."""
    store = Store(shard.store_url, shard.storage_options)
    path = store.shard_file(shard.name, shard.version, shard.entry)
    index = store.shard_file(shard.name, shard.version, shard.entry, index=True)
    reader = read_shard_from(store.fs, path, index, shard.shard_format)
    texts: list[Any] = []
    keys: list[str] = []
    for sample in reader:
        texts.append(_text(sample.get(args.field)))
        keys.append(f"{shard.label}#{sample[KEY]}")
    family = HashFamily(args.seed, args.hashes)
    return Signed(signatures(texts, args.shingle, family), np.array(keys, dtype=str))


def _text(value: Any) -> str | None:
    """A stored field as text (fields are stored as bytes)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    return value if isinstance(value, str) or value is None else str(value)
