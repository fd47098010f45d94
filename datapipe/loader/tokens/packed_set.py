"""A token version seen as rows: the ShardSet a Loader with ``pack=`` reads in place of samples.

Its "shards" are windows (runs of ``window`` consecutive token shards) and its "samples" the rows
each window packs into, so the loader's global order, batch plan, world dealing, resumption,
mixing, ledger and audit all work on rows unchanged. A row's content is a function of the
version, the pack settings, the seed and the shuffle flag alone: each epoch delivers the same
rows in its own order (windows permuted, rows shuffled within a window).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from datapipe.errors import ConfigError
from datapipe.loader.dataset import Dataset
from datapipe.loader.schedule import EpochOrder
from datapipe.loader.tokens.pack import Pack
from datapipe.loader.tokens.packed_files import PackedFiles
from datapipe.loader.tokens.window import concat_rows, row_count
from datapipe.versioning.manifest import short_id

FIELDS = {
    "input_ids": "int64",
    "labels": "int64",
    "position_ids": "int64",
    "cu_seqlens": "int32",
    "max_seqlen": "int",
}


def token_dataset(dataset: Dataset, what: str) -> Dataset:
    """``dataset``, checked to be a token version (a ConfigError naming its fields if not)."""
    if not isinstance(dataset, Dataset) or dataset.format.name != "tokens":
        fields = ", ".join(sorted(dataset.fields)) or "none"
        raise ConfigError(
            f"{what}: pack= reads token versions (shards.format: tokens, built with a tokenize "
            f"stage); {dataset!r} has the fields {fields}: load it without pack="
        )
    return dataset


class PackedSet:
    """A token Dataset as rows of ``pack.length`` tokens (the ShardSet protocol; see the module)."""

    def __init__(
        self,
        dataset: Dataset,
        pack: Pack,
        seed: int = 0,
        shuffle: bool = True,
        window: int = 4,
        source: str | None = None,
    ) -> None:
        self.dataset = token_dataset(dataset, source or dataset.name)
        self.pack = pack
        self.files = PackedFiles(dataset, pack, seed, shuffle, window, source or dataset.name)
        self.shard_sizes = self._rows()

    def _rows(self) -> np.ndarray:
        """Rows per window: from the manifest's token counts for concat, else from the windows'
        document lengths."""
        files = self.files
        counts = np.empty(files.windows, dtype=np.int64)
        for w in range(files.windows):
            shards = files.shards(w)
            if self.pack.mode == "concat":
                tokens = sum(int(self.dataset.shards[s].tokens or 0) for s in shards)
                counts[w] = concat_rows(tokens, self.pack.length)
            else:
                lengths = [files.shard(s).lengths for s in shards]
                counts[w] = row_count(np.concatenate(lengths), self.pack)
            if files.remote and self.pack.mode != "concat":  # back to the cache until read
                files.release(w)
        return counts

    @property
    def version(self) -> str:
        """The token version's id."""
        return self.dataset.version

    @property
    def split(self) -> str | None:
        """The split read (None: the whole version)."""
        return self.dataset.split

    @property
    def name(self) -> str:
        """The dataset's name."""
        return self.dataset.name

    @property
    def tokenizer(self) -> Any:
        """The version's TokenizerRef (None when the manifest has none)."""
        return self.dataset.manifest.lineage.tokenizer

    @property
    def fields(self) -> dict[str, str]:
        """The fields of a packed batch."""
        return dict(FIELDS)

    @property
    def sample_bytes(self) -> float:
        """Stored bytes a row reads (what the page drops and chunking go by)."""
        return sum(s.data_bytes for s in self.dataset.shards) / max(len(self), 1)

    @property
    def window_bytes(self) -> float:
        """Stored bytes of its largest window's rows: what reading a window maps."""
        return self.sample_bytes * float(np.max(self.shard_sizes, initial=0))

    def __len__(self) -> int:
        return int(self.shard_sizes.sum())

    def __repr__(self) -> str:
        return f"PackedSet({self.dataset!r}, {self.pack}, {len(self)} rows)"

    def order(self, seed: int, epoch: int, shuffle: bool, block_shards: int) -> EpochOrder:
        """Epoch ``epoch``'s order of rows: windows permuted, each window's rows shuffled."""
        return EpochOrder(self.shard_sizes, seed, epoch, shuffle, 1)

    def check_fields(self, fields: Sequence[str] | None, decode: Mapping[str, Any] | None) -> None:
        """fields= and decode= do not apply to packed rows."""
        if fields is not None or decode:
            raise ConfigError(
                "fields= and decode= do not apply with pack=: a packed batch holds "
                f"{', '.join(FIELDS)} and __key__"
            )

    def source_names(self, shard_ids: np.ndarray) -> list[str] | None:
        """None: one dataset's rows have no source name."""
        return None

    def close(self) -> None:
        """Release the token version's shards and its lease."""
        self.dataset.close()


def packed(data: Any, pack: Pack | None, seed: int, shuffle: bool, window: int) -> Any:
    """``data`` (a Dataset or a Mix) read as rows of ``pack``; as it is without a pack (a
    ConfigError for token versions, whose documents a batch of samples cannot hold)."""
    if pack is None:
        for ds in getattr(data, "datasets", (data,)):
            if isinstance(ds, Dataset) and ds.format.name == "tokens":
                raise ConfigError(
                    f"{ds!r} is a token version: a Loader reads it as rows of tokens, "
                    "pack=datapipe.pack(length=...) (docs/guide/loading.md#packed-sequences); "
                    "one document's ids are open_dataset(url).tokens(i)"
                )
        return data
    if not isinstance(pack, Pack):
        raise ConfigError(f"pack= takes datapipe.pack(length=...), got {pack!r}")
    if hasattr(data, "datasets"):  # a Mix: each source packed, one tokenizer for all
        return data.packed(pack, seed, shuffle, window)
    rows = PackedSet(data, pack, seed, shuffle, window)
    if not len(rows):  # (a mix names an empty source of weight > 0 itself)
        raise ConfigError(
            f"{data!r} ({data.manifest.tokens} tokens) packs into no row of {pack.length} tokens "
            "(concat takes length + 1 tokens from a window of block_shards shards); give a "
            "smaller length, a larger block_shards, or another mode"
        )
    return rows


def same_tokenizer(sources: Mapping[str, PackedSet]) -> None:
    """A ConfigError naming both sources when two were made by different tokenizer files or
    end their documents with different ids."""
    names = list(sources)
    first = sources[names[0]]
    for name in names[1:]:
        other = sources[name]
        for what, ours, theirs in (
            ("tokenizer", _sha(first), _sha(other)),
            ("end-of-text id", _eos(first), _eos(other)),
        ):
            if ours != theirs:
                raise ConfigError(
                    f"mix sources {names[0]!r} ({_short(first)}) and {name!r} ({_short(other)}) "
                    f"have different {what}s ({ours} and {theirs}): their token ids mean "
                    "different text; mix token versions built with one tokenizer.json"
                )


def _sha(source: PackedSet) -> str:
    tokenizer = source.tokenizer
    return f"sha256 {tokenizer.sha256[:12]}" if tokenizer is not None else "none recorded"


def _eos(source: PackedSet) -> str:
    tokenizer = source.tokenizer
    return str(tokenizer.eos_id) if tokenizer is not None else "none recorded"


def _short(source: PackedSet) -> str:
    return f"{source.name}@{short_id(source.version)}"
