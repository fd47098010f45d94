"""The step ledger: which samples a global step delivers, to which rank, found without reading a
payload."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.loader.settings import LoaderSettings
from datapipe.loader.shard_set import ShardSet
from datapipe.loader.timeline import Timeline


@dataclass(frozen=True)
class Entry:
    """One sample of a step: the rank it goes to, its source and key, and where it is stored."""

    step: int
    rank: int
    source: str
    key: str
    shard: str  # the shard file, relative to the version directory
    offset: int  # the byte offset of the sample's first member in the shard


def step_samples(
    data: ShardSet, settings: LoaderSettings, timeline: Timeline, step: int, rank: int
) -> tuple[np.ndarray, np.ndarray]:
    """(shard ids, samples in shard) of rank ``rank``'s batch at global step ``step``."""
    epoch, index = timeline.locate(step)
    positions = timeline.plan(epoch).positions(rank, index)
    return data.order(settings.seed, epoch, settings.shuffle, settings.block_shards).locate(
        positions
    )


def sources_of(data: ShardSet, shard_ids: np.ndarray) -> list[str]:
    """Each sample's source: the mix source's name, or the dataset's name."""
    names = data.source_names(shard_ids)
    if names is not None:
        return names
    return [data.name] * len(shard_ids)  # type: ignore[attr-defined]  # one dataset: its name


@dataclass(frozen=True)
class RowEntry:
    """One packed row of a step: the rank it goes to and its pieces (source, document key, first
    token, end token)."""

    step: int
    rank: int
    pieces: list[tuple[str, str, int, int]]


def batch_keys(
    data: ShardSet, settings: LoaderSettings, timeline: Timeline, step: int, ranks: range
) -> list[Any]:
    """The (source, key) pairs of ``step`` for ``ranks``, rank after rank; of packed rows, each
    row's pieces."""
    pairs: list[Any] = []
    for rank in ranks:
        shard_ids, local = step_samples(data, settings, timeline, step, rank)
        keys = data.files.keys_of(shard_ids, local)
        if getattr(data, "pack", None) is not None:
            pairs.extend(keys)  # a row's pieces name their source
        else:
            pairs.extend(zip(sources_of(data, shard_ids), keys, strict=True))
    return pairs


def row_entries(
    data: ShardSet, settings: LoaderSettings, timeline: Timeline, steps: range, ranks: range
) -> list[RowEntry]:
    """Every packed row of ``steps`` for ``ranks``, step by step and rank by rank."""
    return [
        RowEntry(step, rank, pieces)
        for step in steps
        for rank in ranks
        for pieces in data.files.keys_of(*step_samples(data, settings, timeline, step, rank))
    ]


def entries(
    data: ShardSet, settings: LoaderSettings, timeline: Timeline, steps: range, ranks: range
) -> list[Entry]:
    """Every sample of ``steps`` for ``ranks``, step by step and rank by rank, with shard and
    offset."""
    out: list[Entry] = []
    for step in steps:
        for rank in ranks:
            shard_ids, local = step_samples(data, settings, timeline, step, rank)
            keys = data.files.keys_of(shard_ids, local)
            for shard, row, source, key in zip(
                shard_ids.tolist(), local.tolist(), sources_of(data, shard_ids), keys, strict=True
            ):
                files, number = data.files.part(shard)
                offset = int(files.index(number).sample_start[row])
                out.append(Entry(step, rank, source, key, files.entries[number].path, offset))
    return out
