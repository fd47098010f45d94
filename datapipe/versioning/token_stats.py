"""What a token version holds: documents, tokens, its tokenizer and its documents' lengths."""

from __future__ import annotations

from typing import Any

import numpy as np

from datapipe.formats.tokens.megatron import MegatronIndex
from datapipe.formats.tokens.writer import MEGATRON_INDEX
from datapipe.storage.fs import read_bytes
from datapipe.versioning.manifest import Manifest, ShardEntry
from datapipe.versioning.store import Store

TOKEN_FORMAT = "tokens"
# the length distribution `info` shows: these percentiles between the shortest and longest
PERCENTILES = (50, 90, 99)


def is_token_version(m: Manifest) -> bool:
    """Whether ``m``'s shards are token shards (documents of token ids)."""
    return m.shard_format == TOKEN_FORMAT


def megatron_indexes(store: Store, name: str, m: Manifest) -> list[MegatronIndex]:
    """Each shard's Megatron-Core index (its ``.idx`` companion), in manifest order: a few bytes
    a document, never the token ids in ``.bin``."""
    return [shard_megatron_index(store, name, m.version, entry) for entry in m.shards]


def shard_megatron_index(store: Store, name: str, version: str, entry: ShardEntry) -> MegatronIndex:
    """The Megatron-Core index of token shard ``entry`` of ``version``: its documents' lengths."""
    directory = store.shard_dir(name, version, entry)
    filename = next(f for c, f in entry.companion_names() if c.suffix == MEGATRON_INDEX)
    path = f"{directory}/{filename}"
    return MegatronIndex.from_bytes(read_bytes(store.fs, path, store.retry), path)


def length_distribution(lengths: np.ndarray) -> dict[str, int] | None:
    """min, p50, p90, p99 and max of ``lengths``, each the length of a document (nearest rank);
    None for no documents."""
    if not len(lengths):
        return None
    qs = np.percentile(lengths, PERCENTILES, method="inverted_cdf")
    return {
        "min": int(lengths.min()),
        **{f"p{p}": int(q) for p, q in zip(PERCENTILES, qs, strict=True)},
        "max": int(lengths.max()),
    }


def token_summary(store: Store, name: str, m: Manifest) -> dict[str, Any] | None:
    """A token version's documents, tokens, dtype, vocabulary, BOS/EOS ids, tokenizer and the
    distribution of its documents' lengths (``info``); None for a version of other samples."""
    if not is_token_version(m):
        return None
    indexes = megatron_indexes(store, name, m)
    lengths = np.concatenate([i.lengths.astype(np.int64) for i in indexes] or [np.zeros(0, int)])
    tokenizer = m.lineage.tokenizer
    # token shards written without a tokenize stage have no lineage.tokenizer: their index knows
    dtype = tokenizer.dtype if tokenizer else (indexes[0].dtype.name if indexes else None)
    return {
        "documents": m.samples,
        # a manifest from before token counts has them only in its .idx files
        "tokens": m.tokens if m.tokens is not None else int(lengths.sum()),
        "dtype": dtype,
        "vocab_size": tokenizer.vocab_size if tokenizer else None,
        "eos_id": tokenizer.eos_id if tokenizer else None,
        "bos_id": tokenizer.bos_id if tokenizer else None,
        "tokenizer_sha256": tokenizer.sha256 if tokenizer else None,
        "tokenizer_library": tokenizer.library if tokenizer else None,
        "lengths": length_distribution(lengths),
    }
