"""A source opened once (files listed, options split, schema inferred), then partitioned, a pure
step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from datapipe.builder.source.align import align_here
from datapipe.builder.source.base import Source, SourceSpec
from datapipe.builder.source.listing import list_files
from datapipe.builder.source.options import (
    DEFAULT_BLOCKSIZE,
    DEFAULT_FILES_PER_PARTITION,
    EXECUTION_OPTIONS,
    FILE_ROW_FORMATS,
    execution_count,
    execution_size,
)
from datapipe.builder.source.registry import get_source_format
from datapipe.builder.source.schema import SCHEMA_TYPES
from datapipe.errors import ConfigError


def open_source(
    spec: SourceSpec,
    base_dir: str,
    storage_options: Mapping[str, Any] | None = None,
    execution: Mapping[str, Any] | None = None,
) -> Source:
    """List the files and learn what reading them needs (the schema, from one sample),
    unpartitioned.

    ``execution`` holds partitioning options (blocksize, files_per_partition) over those of
    ``spec.options``; they shape the work, never the result.
    """
    options = {k: v for k, v in spec.options.items() if k not in EXECUTION_OPTIONS}
    execution = {
        **{k: v for k, v in spec.options.items() if k in EXECUTION_OPTIONS},
        **(execution or {}),
    }
    storage_options = {**execution.pop("storage_options", {}), **(storage_options or {})}
    fs, files = list_files(spec, base_dir, storage_options)
    dtypes = options.pop("dtype", None) or {}
    if not isinstance(dtypes, dict) or any(t not in SCHEMA_TYPES for t in dtypes.values()):
        raise ConfigError(
            "source.options.dtype: expected a mapping of column -> one of "
            f"{', '.join(SCHEMA_TYPES)}"
        )
    blocksize = execution_size(execution, "blocksize", DEFAULT_BLOCKSIZE)
    per = DEFAULT_FILES_PER_PARTITION
    if spec.format in FILE_ROW_FORMATS:
        per = execution_count(execution, "files_per_partition", DEFAULT_FILES_PER_PARTITION)
    fmt = get_source_format(spec.format)
    described = fmt.describe(
        fs, tuple(files), fmt.section_options(spec, base_dir, fs, options), dtypes
    )
    return replace(described, blocksize=blocksize, files_per_partition=per)


def partition_source(source: Source, blocksize: int | None = None) -> Source:
    """``source`` cut into partitions of ``blocksize`` bytes (default: the configured one); quoted
    CSV files still to be aligned (``align.scans_needed``, ``align.align_parts``)."""
    return get_source_format(source.format).partition(source, blocksize or source.blocksize)


def partitioned_source(
    spec: SourceSpec,
    base_dir: str,
    storage_options: Mapping[str, Any] | None = None,
    execution: Mapping[str, Any] | None = None,
    *,
    align: bool = True,
) -> Source:
    """``open_source``, ``partition_source`` and, unless ``align=False``, the quote scan run here
    (``align_here``)."""
    source = partition_source(open_source(spec, base_dir, storage_options, execution))
    return align_here(source) if align else source
