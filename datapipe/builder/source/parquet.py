"""Parquet sources: one partition per row group, integer and bool columns kept nullable."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pandas as pd

from datapipe.builder.source.base import InputFile, Part, RawPart, Source, SourceFormat, open_input
from datapipe.builder.source.partition import row_group_parts
from datapipe.errors import ConfigError


def _row_groups(fs: Any, f: InputFile) -> int:
    import pyarrow.parquet as pq

    try:
        with fs.open(f.path, "rb") as handle:
            return pq.ParquetFile(handle).metadata.num_row_groups
    except Exception as e:  # pyarrow raises ArrowInvalid and OSError kinds for a bad file
        raise ConfigError(f"{f.label}: not a readable Parquet file ({e})") from None


def _nullable(arrow_type: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_integer(arrow_type):
        return pd.Int64Dtype()
    if pa.types.is_boolean(arrow_type):
        return pd.BooleanDtype()
    return None


def read_parquet_part(source: Source, part: Part) -> RawPart:
    """One row group, with integer and bool columns kept nullable (not turned into floats)."""
    import pyarrow.parquet as pq

    f = source.files[part.file]
    with open_input(source, f, compression=None) as handle:
        try:
            table = pq.ParquetFile(handle).read_row_group(part.row_group, **source.options)
        except Exception as e:  # pyarrow's error kinds vary by damage
            raise ConfigError(
                f"{f.label}: row group {part.row_group} cannot be read ({e})"
            ) from None
    frame = table.to_pandas(types_mapper=_nullable)
    frame.index = pd.RangeIndex(len(frame))
    return RawPart(frame, len(frame))


class ParquetFormat(SourceFormat):
    """Parquet files; their own schema gives the column types."""

    name = "parquet"

    def reader_options(self) -> tuple[str, ...]:
        """columns and use_pandas_metadata, as pyarrow's read_row_group takes them."""
        return ("columns", "use_pandas_metadata")

    def check_options(self, options: Mapping[str, Any]) -> tuple[str, str] | None:
        """pyarrow checks the values when it reads."""
        return None

    def describe(
        self,
        fs: Any,
        files: tuple[InputFile, ...],
        options: dict[str, Any],
        dtypes: Mapping[str, str],
    ) -> Source:
        """The row groups of each file, from its footer."""
        return Source(
            self.name,
            fs,
            files,
            (),
            options,
            has_header=False,
            row_groups=tuple(_row_groups(fs, f) for f in files),
        )

    def partition(self, source: Source, blocksize: int) -> Source:
        """One part per row group, whatever the blocksize: a row group is read whole."""
        return replace(source, parts=tuple(row_group_parts(source.row_groups)))

    def read(self, source: Source, part: Part) -> RawPart:
        """``read_parquet_part``."""
        return read_parquet_part(source, part)
