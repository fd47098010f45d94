"""What a Loader, the ledger and the audit read, opened from a URL, a mix file, a Dataset or a
Mix."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from datapipe.errors import ConfigError
from datapipe.loader.dataset import Dataset, open_dataset
from datapipe.loader.mix import Mix, mix
from datapipe.loader.shard_set import ShardSet


def open_data(
    data: str | os.PathLike[str] | Dataset | Mix,
    storage_options: Mapping[str, Any] | None = None,
    split: str | None = None,
    **options: Any,
) -> ShardSet:
    """What a Loader reads: a Dataset or Mix as given, a mix file (.yaml/.yml), or a dataset URL
    (its ``split``)."""
    text = None if isinstance(data, Dataset | Mix) else os.fspath(data)
    is_mix = isinstance(data, Mix) or (
        text is not None and text.endswith((".yaml", ".yml")) and os.path.isfile(text)
    )
    if split is not None and (is_mix or isinstance(data, Dataset)):
        raise ConfigError(
            f"split={split!r} applies to a dataset URL; for a mix, name the split of each source "
            "({dataset: URL, split: NAME}); for a Dataset, open it with "
            "open_dataset(url, split=...)"
        )
    if isinstance(data, Dataset | Mix):
        return data
    if is_mix:
        return mix(text, storage_options=storage_options, **options)
    return open_dataset(text, storage_options, split=split, **options)


def open_checked(
    data: str | os.PathLike[str] | Dataset | Mix,
    storage_options: Mapping[str, Any] | None = None,
    split: str | None = None,
    packing: tuple[Any, int, bool, int] | None = None,
    **options: Any,
) -> tuple[ShardSet, bool]:
    """``open_data`` with every shard checked present (a missing one fails now, before workers
    start), and whether it was opened here rather than given (then the caller closes it).

    ``packing``: (pack, seed, shuffle, window) to read a token version (or mix) as packed rows.
    """
    opened = open_data(data, storage_options, split, **options)
    owned = opened is not data
    try:
        opened.files.check()
        if packing is not None:
            from datapipe.loader.tokens.packed_set import packed

            read = packed(opened, *packing)
            return read, owned
    except BaseException:
        if owned:  # what was opened here is let go here: its leases with it
            opened.close()
        raise
    return opened, owned
