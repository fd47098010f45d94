"""The source.options that only shape the work (how the input is split or reached), never a byte of
output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from datapipe.errors import ConfigError
from datapipe.storage.byte_size import parse_size

EXECUTION_OPTIONS = frozenset({"blocksize", "files_per_partition", "storage_options"})
DEFAULT_BLOCKSIZE = 64 << 20
DEFAULT_FILES_PER_PARTITION = 256
# one row per file: partitions are groups of files
FILE_ROW_FORMATS = frozenset({"files", "class_folders"})


def check_execution_option(key: str, value: Any) -> str | None:
    """What is wrong with partitioning option ``key`` (one of EXECUTION_OPTIONS) set to ``value``,
    or None."""
    if key == "blocksize":
        try:
            parse_size(value)
        except ValueError as e:
            return f"{e} (got {value!r})"
    elif key == "files_per_partition":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"must be a whole number of at least 1 (got {value!r})"
    elif key == "storage_options":
        if not isinstance(value, dict):
            return "must be a mapping of fsspec storage options"
    return None


def execution_size(execution: Mapping[str, Any], key: str, default: int) -> int:
    """A byte size from the partitioning options; ConfigError naming ``source.options.KEY``."""
    try:
        return parse_size(execution.get(key, default))
    except ValueError as e:
        raise ConfigError(f"source.options.{key}: {e} (got {execution.get(key)!r})") from None


def execution_count(execution: Mapping[str, Any], key: str, default: int) -> int:
    """A positive count from the partitioning options; ConfigError naming ``source.options.KEY``."""
    value = execution.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"source.options.{key}: must be a whole number of at least 1 (got {value!r})"
        )
    return value
