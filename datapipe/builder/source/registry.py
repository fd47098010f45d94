"""Maps a source format name to its reader; the checks of source.options and the read of one
partition."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from datapipe.builder.source.base import Part, RawPart, Source, SourceFormat
from datapipe.builder.source.class_folders import ClassFoldersFormat
from datapipe.builder.source.csvfile import CsvFormat
from datapipe.builder.source.files import FilesFormat
from datapipe.builder.source.jsonl import JsonlFormat
from datapipe.builder.source.options import EXECUTION_OPTIONS, check_execution_option
from datapipe.builder.source.parquet import ParquetFormat
from datapipe.errors import ConfigError

SOURCE_FORMATS: dict[str, SourceFormat] = {
    f.name: f
    for f in (CsvFormat(), ParquetFormat(), JsonlFormat(), FilesFormat(), ClassFoldersFormat())
}


def get_source_format(name: str) -> SourceFormat:
    """The source format called ``name``; ConfigError listing the choices."""
    fmt = SOURCE_FORMATS.get(name)
    if fmt is None:
        raise ConfigError(
            f"source.format: unknown source format {name!r}; choose one of: "
            f"{', '.join(SOURCE_FORMATS)}"
        )
    return fmt


def reader_options(fmt: str) -> tuple[str, ...]:
    """The source.options keys the ``fmt`` reader takes (besides the partitioning ones)."""
    return get_source_format(fmt).reader_options()


def check_source_options(fmt: str, options: Mapping[str, Any]) -> tuple[str, str] | None:
    """(key, problem) of the first option the ``fmt`` reader cannot take, or None."""
    source_format = get_source_format(fmt)
    taken = source_format.reader_options()
    for key, value in options.items():
        if key in EXECUTION_OPTIONS:
            problem = check_execution_option(key, value)
            if problem is not None:
                return key, problem
        elif key not in taken:
            listed = (
                f"{source_format.options_help} and " + ", ".join(sorted(EXECUTION_OPTIONS))
                if source_format.options_help
                else ", ".join(sorted({*taken, *EXECUTION_OPTIONS}))
            )
            return key, f"the {fmt} reader does not take this option; it takes {listed}"
    return source_format.check_options(options)


def read_part(source: Source, part: Part) -> RawPart:
    """Parse partition ``part`` of ``source``."""
    return get_source_format(source.format).read(source, part)
