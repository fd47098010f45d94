"""A mix: several dataset versions (or splits) read as one by weight; ``datapipe.mix`` makes one."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from datapipe.errors import ConfigError, did_you_mean
from datapipe.loader.chained_files import ChainedFiles
from datapipe.loader.dataset import Dataset, open_dataset
from datapipe.loader.interleave import Interleave
from datapipe.loader.mix_order import MixOrder, Segment

# a URL, a Dataset, or {dataset: URL, split: NAME}
SourceSpec = str | os.PathLike[str] | Dataset | Mapping[str, Any]


class Mix:
    """Datasets read together: ``len(mix)`` samples an epoch, each source's share set by its weight.

    A Loader reads a Mix as it reads one dataset (docs/guide/training-runs.md for the order); the
    batches carry ``__source__``, the source name of each sample. Shards are numbered source after
    source.
    """

    def __init__(
        self,
        sources: Mapping[str, Dataset],
        weights: Mapping[str, float],
        epoch_samples: int | None = None,
        segment: Segment | None = None,
    ) -> None:
        if not sources:
            raise ConfigError("a mix needs at least one source")
        self.names = tuple(sources)
        self.datasets = tuple(sources[name] for name in self.names)
        self._name_array = np.array(self.names, dtype=object)
        self.weights = _checked_weights(self.names, weights)
        for name, ds, w in zip(self.names, self.datasets, self.weights, strict=True):
            if w > 0 and len(ds) == 0:
                raise ConfigError(
                    f"mix source {name!r} ({ds!r}) has no samples; give it weight 0 or leave it out"
                )
        self._epoch_given = epoch_samples
        # weights left to the sources' sizes (datapipe.mix without weights): read as packed rows,
        # they become the sources' rows
        self.weights_by_size = False
        self.epoch_samples = (
            int(epoch_samples) if epoch_samples is not None else sum(len(d) for d in self.datasets)
        )
        if self.epoch_samples < 1:
            raise ConfigError(f"epoch_samples must be at least 1, got {epoch_samples!r}")
        self.segment = segment or Segment(0, (0,) * len(self.names))
        self.interleave = Interleave(self.weights)
        self._fields = _common_fields(self.names, self.datasets)
        self.shard_sizes = np.concatenate([d.shard_sizes for d in self.datasets]).astype(np.int64)
        # shards are numbered source after source
        self.files = ChainedFiles([d.files for d in self.datasets])

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}={w:g}" for n, w in zip(self.names, self.weights, strict=True))
        return f"Mix({parts}; {self.epoch_samples} samples an epoch)"

    def __len__(self) -> int:
        return self.epoch_samples

    @property
    def identity(self) -> dict[str, list[Any]]:
        """Source name -> [version id, split]: what a loader state of this mix must match."""
        return {
            n: [d.version, getattr(d, "split", None)]
            for n, d in zip(self.names, self.datasets, strict=True)
        }

    @property
    def version(self) -> str:
        """An id of the sources and their versions (not of the weights, which may change on
        resume)."""
        return (
            "mix-" + hashlib.sha256(json.dumps(self.identity, sort_keys=True).encode()).hexdigest()
        )

    @property
    def fields(self) -> dict[str, str]:
        """The fields every source has (with one kind)."""
        return dict(self._fields)

    @property
    def sample_bytes(self) -> float:
        """Mean stored bytes per sample of the mixed stream."""
        return float(
            sum(w * d.sample_bytes for w, d in zip(self.weights, self.datasets, strict=True))
        )

    def order(self, seed: int, epoch: int, shuffle: bool, block_shards: int) -> MixOrder:
        """The global order of epoch ``epoch`` (loader/mix_order.py)."""
        return MixOrder(
            self.names,
            tuple(d.shard_sizes for d in self.datasets),
            self.interleave,
            self.segment,
            self.epoch_samples,
            seed,
            epoch,
            shuffle,
            block_shards,
        )

    def cursors(self, stream_position: int) -> tuple[int, ...]:
        """Items each source has delivered once the stream reaches ``stream_position`` (from the
        segment on)."""
        done = self.interleave.counts(stream_position - self.segment.start)
        return tuple(int(c) for c in np.asarray(self.segment.cursors) + done)

    def reweighted(self, weights: Mapping[str, float], stream_position: int) -> Mix:
        """This mix continued under ``weights`` from ``stream_position``: every source from its
        cursor."""
        return Mix(
            dict(zip(self.names, self.datasets, strict=True)),
            weights,
            self.epoch_samples,
            Segment(stream_position, self.cursors(stream_position)),
        )

    @property
    def pack(self) -> Any:
        """The sources' Pack when they are read as packed rows (None: samples)."""
        return getattr(self.datasets[0], "pack", None)

    def packed(self, pack: Any, seed: int, shuffle: bool, window: int) -> Mix:
        """This mix read as rows of ``pack``: every source a token version of one tokenizer;
        ``epoch_samples`` counts rows (by default the sources' rows), and weights left to the
        sources' sizes are their rows."""
        from datapipe.loader.tokens.packed_set import PackedSet, same_tokenizer

        sources = {
            n: PackedSet(d, pack, seed, shuffle, window, source=n)
            for n, d in zip(self.names, self.datasets, strict=True)
        }
        same_tokenizer(sources)
        weights = dict(zip(self.names, self.weights, strict=True))
        if self.weights_by_size:
            weights = {n: float(len(d)) for n, d in sources.items()}
        return Mix(sources, weights, self._epoch_given, self.segment)  # type: ignore[arg-type]

    def with_segment(self, segment: Segment) -> Mix:
        """This mix with the interleave restarted where ``segment`` says (a state's)."""
        # the sources, interleave and fields are the same; only the segment differs
        resumed = copy.copy(self)
        resumed.segment = replace(segment, cursors=tuple(segment.cursors))
        return resumed

    def check_fields(self, fields: Sequence[str] | None, decode: Mapping[str, Any] | None) -> None:
        """Fail, naming the source, when a field asked for or decoded is not in every source."""
        for name in [*(fields or ()), *(decode or {})]:
            if name in self._fields:
                continue
            lacking = [
                n for n, d in zip(self.names, self.datasets, strict=True) if name not in d.fields
            ]
            if not lacking:  # in every source, with different kinds: _common_fields said so already
                continue
            ds = self.datasets[self.names.index(lacking[0])]
            raise ConfigError(
                f"field {name!r} is not in mix source {lacking[0]!r}"
                f"{did_you_mean([name], ds.fields)} ({ds!r}, fields: "
                f"{', '.join(sorted(ds.fields)) or 'none'}); ask only for fields every source has: "
                f"{', '.join(sorted(self._fields)) or 'none'}"
            )

    def source_names(self, shard_ids: np.ndarray) -> list[str]:
        """The source name of each sample."""
        return self._name_array[self.files.owner(shard_ids)].tolist()

    def held(self) -> list[int]:
        """Global ids of the shards whose cached copies are held."""
        return self.files.held()

    def close(self) -> None:
        """Release every shard of every source, and the sources' leases."""
        for ds in self.datasets:
            ds.close()


def _checked_weights(names: tuple[str, ...], weights: Mapping[str, float]) -> tuple[float, ...]:
    """The weights in source order, normalized; a ConfigError naming the source for a bad one."""
    unknown = sorted(set(weights) - set(names))
    if unknown:
        raise ConfigError(
            f"weights name {', '.join(map(repr, unknown))}, which is not a source of the mix "
            f"(sources: {', '.join(names)})"
        )
    missing = [n for n in names if n not in weights]
    if missing:
        raise ConfigError(
            f"mix source {missing[0]!r} has no weight; give every source one (0 leaves it out)"
        )
    values = []
    for name in names:
        w = weights[name]
        try:
            w = float(w)
        except (TypeError, ValueError):
            raise ConfigError(f"mix source {name!r}: weight {w!r} is not a number") from None
        if math.isnan(w) or math.isinf(w) or w < 0:
            raise ConfigError(f"mix source {name!r}: weight {w!r} must be a finite number >= 0")
        values.append(w)
    total = sum(values)
    if total <= 0:
        raise ConfigError(
            f"every weight of the mix is 0 ({', '.join(names)}); give at least one "
            "source a weight > 0"
        )
    return tuple(v / total for v in values)


def _common_fields(names: tuple[str, ...], datasets: tuple[Dataset, ...]) -> dict[str, str]:
    """Fields every source has; a ConfigError naming both sources for a field of two kinds."""
    common = dict(datasets[0].fields)
    for name, ds in zip(names[1:], datasets[1:], strict=True):
        for field_name, kind in ds.fields.items():
            if field_name in common and common[field_name] != kind:
                first = next(
                    n for n, d in zip(names, datasets, strict=True) if field_name in d.fields
                )
                raise ConfigError(
                    f"field {field_name!r} is {common[field_name]} in mix source {first!r} "
                    f"but {kind} "
                    f"in {name!r}; rebuild one of them so that the kinds agree, or mix "
                    "other sources"
                )
        common = {f: k for f, k in common.items() if f in ds.fields}
    return common


def _open(
    spec: SourceSpec, name: str, storage_options: Mapping[str, Any] | None, **options: Any
) -> Dataset:
    """A mix source opened: a Dataset as given, a URL, or {dataset: URL, split: NAME}."""
    if isinstance(spec, Dataset):
        return spec
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - {"dataset", "split"})
        if unknown or "dataset" not in spec:
            raise ConfigError(
                f"mix source {name!r}: give a dataset URL, or {{dataset: URL, split: NAME}} "
                f"(got keys {', '.join(map(str, spec)) or 'none'})"
            )
        split = spec.get("split")
        if split is not None:
            options["split"] = split
        return open_dataset(spec["dataset"], storage_options, **options)
    if isinstance(spec, str | os.PathLike):
        return open_dataset(spec, storage_options, **options)
    raise ConfigError(f"mix source {name!r}: {spec!r} is not a dataset URL or a Dataset")


def mix(
    sources: Mapping[str, SourceSpec] | str | os.PathLike[str],
    weights: Mapping[str, float] | None = None,
    epoch_samples: int | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    **open_options: Any,
) -> Mix:
    """Mix datasets by weight: ``mix({"web": "store/web@v3", "code": ds}, weights={"web": 0.7,
    "code": 0.3})``.

    ``sources``: name -> dataset URL, Dataset or {dataset: URL, split: NAME}; or the path of a mix
    file (YAML with ``sources``, ``weights`` and optional ``epoch_samples``,
    docs/guide/training-runs.md); the ``weights`` and ``epoch_samples`` given here override the
    file's.
    ``weights`` default to the sources' sizes; ``epoch_samples`` (samples per epoch) to their sum.
    ``open_options`` (verify, cache_dir, cache_limit, retries) go to ``open_dataset`` for each URL.
    """
    if isinstance(sources, str | os.PathLike):
        from datapipe.loader.mix_file import read_mix_file

        spec = read_mix_file(sources)
        # given: they win
        sources, weights = spec.sources, weights if weights is not None else spec.weights
        epoch_samples = spec.epoch_samples if epoch_samples is None else epoch_samples
    if not isinstance(sources, Mapping):
        raise ConfigError(
            "mix sources must be a mapping of name -> dataset URL or Dataset, or a mix file path"
        )
    opened = {
        str(name): _open(spec, str(name), storage_options, **open_options)
        for name, spec in sources.items()
    }
    by_size = weights is None
    if by_size:
        weights = {name: float(len(ds)) for name, ds in opened.items()}
    mixed = Mix(opened, weights, epoch_samples)
    mixed.weights_by_size = by_size
    return mixed
