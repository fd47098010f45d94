"""Versions that share shards, committed by hand as an incremental build will: new shards written,
the rest shared."""

from __future__ import annotations

from typing import Any

import numpy as np
from sample_data import simple_samples

from datapipe.formats.base import KEY
from datapipe.formats.registry import get_format
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store

FMT = get_format("webdataset")
FIELDS = {"bin": "bytes", "cls": "bytes"}
TOKEN_FIELDS = {"tokens": "ndarray", "url": "bytes"}
PER_SHARD = 10


def shard_samples(shard: int, seed: int = 0) -> list[dict[str, Any]]:
    """The 10 samples of shard ``shard`` (keys sample00NNNN), their payloads drawn from ``seed``."""
    samples = simple_samples(PER_SHARD * (shard + 1), size=200, seed=seed)
    return samples[PER_SHARD * shard :]


def token_samples(shard: int, seed: int = 0) -> list[dict[str, Any]]:
    """The 10 documents of token shard ``shard``: uint16 ids of 1 to 40 tokens drawn from
    ``seed``, and a url."""
    rng = np.random.default_rng([shard, seed])
    out = []
    for i in range(PER_SHARD * shard, PER_SHARD * (shard + 1)):
        ids = rng.integers(0, 50_000, int(rng.integers(1, 41)), dtype=np.uint16)
        out.append({KEY: f"sample{i:06d}", "tokens": ids, "url": f"https://x.org/{i}".encode()})
    return out


def commit_tokens(
    store: Store,
    shards: list[list[dict[str, Any]]],
    name: str = "toks",
    refs: tuple[str, ...] = ("latest",),
) -> Manifest:
    """A version of token shards holding ``shards``' documents, through the versioning writer."""
    writer = store.begin(name)
    fmt = get_format("tokens")
    entries = tuple(writer.write_shard(i, docs, fmt) for i, docs in enumerate(shards))
    return writer.commit(
        Manifest(name=name, shard_format="tokens", fields=TOKEN_FIELDS, shards=entries), refs
    )


def commit_first(
    store: Store, name: str = "toy", shards: int = 3, refs: tuple[str, ...] = ("latest",)
) -> Manifest:
    """A version of ``shards`` shards of 10 samples, none shared."""
    writer = store.begin(name)
    entries = tuple(writer.write_shard(i, shard_samples(i), FMT) for i in range(shards))
    return writer.commit(
        Manifest(name=name, shard_format="webdataset", fields=FIELDS, shards=entries), refs
    )


def commit_sharing(
    store: Store,
    parent: Manifest,
    rewrite: dict[int, int],
    add: int = 0,
    name: str = "toy",
    refs: tuple[str, ...] = ("latest",),
) -> Manifest:
    """A child of ``parent``: shard i is rewritten with seed ``rewrite[i]`` when listed, else
    shared; ``add`` new shards follow. Its samples are those of ``expected_samples``."""
    writer = store.begin(name)
    entries = []
    for i, entry in enumerate(parent.shards):
        if i in rewrite:
            entries.append(writer.write_shard(i, shard_samples(i, rewrite[i]), FMT))
        else:
            entries.append(writer.share_shard(entry, parent.version))
    n = len(parent.shards)
    entries += [writer.write_shard(i, shard_samples(i), FMT) for i in range(n, n + add)]
    return writer.commit(
        Manifest(name=name, shard_format="webdataset", fields=FIELDS, shards=tuple(entries)), refs
    )


def commit_token_child(
    store: Store, parent: Manifest, new: int, name: str = "toks", seed: int = 1
) -> Manifest:
    """A child of token version ``parent``: ``new`` shards written first (documents drawn from
    ``seed``), then the parent's shards reused under their new numbers, as an incremental build
    renumbers them (a hard link locally, ``stored_in`` and ``stored_as`` elsewhere)."""
    writer = store.begin(name)
    fmt = get_format("tokens")
    entries = [
        writer.write_shard(i, token_samples(len(parent.shards) + i, seed), fmt) for i in range(new)
    ]
    for i, entry in enumerate(parent.shards, start=new):
        entries.append(writer.reuse_shard(parent.version, entry, writer.shard_filename(i, fmt)))
    return writer.commit(
        Manifest(name=name, shard_format="tokens", fields=TOKEN_FIELDS, shards=tuple(entries))
    )
