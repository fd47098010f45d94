"""'files' sources: each file is one row (path, name, parent, bytes), files grouped into
partitions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pandas as pd

from datapipe.builder.source.base import InputFile, Part, RawPart, Source, SourceFormat, open_input
from datapipe.builder.source.partition import file_groups


def read_files_part(source: Source, part: Part) -> RawPart:
    """Columns path, name, parent and bytes, one row per file."""
    rows = []
    for i in part.members:
        f = source.files[i]
        with open_input(source, f, compression=None) as handle:
            content = handle.read()
        parent, _, name = f.label.rpartition("/")
        rows.append(
            {"path": f.label, "name": name, "parent": parent.rpartition("/")[2], "bytes": content}
        )
    return RawPart(pd.DataFrame(rows, columns=["path", "name", "parent", "bytes"]), len(rows))


class FilesFormat(SourceFormat):
    """Raw files, one sample each; the reader takes no options."""

    name = "files"

    def reader_options(self) -> tuple[str, ...]:
        """None."""
        return ()

    def check_options(self, options: Mapping[str, Any]) -> tuple[str, str] | None:
        """Nothing to check."""
        return None

    def describe(
        self,
        fs: Any,
        files: tuple[InputFile, ...],
        options: dict[str, Any],
        dtypes: Mapping[str, str],
    ) -> Source:
        """The listing says it all."""
        return Source(self.name, fs, files, (), options, has_header=False)

    def partition(self, source: Source, blocksize: int) -> Source:
        """Groups of files_per_partition files, at most ``blocksize`` bytes together."""
        return replace(
            source, parts=tuple(file_groups(source.files, source.files_per_partition, blocksize))
        )

    def read(self, source: Source, part: Part) -> RawPart:
        """``read_files_part``."""
        return read_files_part(source, part)
