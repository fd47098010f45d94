"""JSON lines sources: one JSON object per line, in byte blocks cut at newlines."""

from __future__ import annotations

import codecs
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pandas as pd

from datapipe.builder.source.base import (
    DEFAULT_ENCODING,
    InputFile,
    Part,
    RawPart,
    Source,
    SourceFormat,
    block_bytes,
    open_input,
    read_sample,
    typed,
)
from datapipe.builder.source.partition import byte_blocks
from datapipe.builder.source.schema import infer_schema


def _sample_schema(sample: bytes, options: Mapping[str, Any]) -> dict[str, str]:
    if not sample:
        return {}
    records = []
    for line in sample.splitlines():
        try:
            record = json.loads(line.decode(options.get("encoding") or DEFAULT_ENCODING))
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return infer_schema(pd.DataFrame.from_records(records)) if records else {}


def read_jsonl_part(source: Source, part: Part) -> RawPart:
    """One JSON object per line (in ``options.encoding``, default UTF-8); a line that is not one is
    a reject."""
    with open_input(source, source.files[part.file]) as handle:
        data = block_bytes(handle, part)
    encoding = source.options.get("encoding") or DEFAULT_ENCODING
    records, rows, rejects = [], [], []
    row = -1
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        row += 1
        try:
            record = json.loads(line.decode(encoding))
        except UnicodeDecodeError:
            rejects.append((row, f"invalid {encoding}", line.decode(encoding, "replace")))
            continue
        except ValueError as e:
            rejects.append((row, f"not valid JSON ({e})", line.decode(encoding, "replace")))
            continue
        if not isinstance(record, dict):
            rejects.append(
                (row, f"expected a JSON object, got {type(record).__name__}", line.decode(encoding))
            )
            continue
        records.append(record)
        rows.append(row)
    frame = (
        pd.DataFrame.from_records(records, index=pd.Index(rows, dtype="int64"))
        if records
        else pd.DataFrame()
    )
    known = [c for c in source.schema if c in frame.columns]
    frame = frame[known + sorted(c for c in frame.columns if c not in source.schema)]
    return typed(source, RawPart(frame, row + 1, rejects), strings=False)


class JsonlFormat(SourceFormat):
    """JSON lines; the reader takes an encoding and column types."""

    name = "jsonl"

    def reader_options(self) -> tuple[str, ...]:
        """encoding and dtype."""
        return ("encoding", "dtype")

    def check_options(self, options: Mapping[str, Any]) -> tuple[str, str] | None:
        """The encoding must be known and keep a newline one byte, as lines are found in the
        bytes."""
        if "encoding" not in options:
            return None
        try:
            ascii_compatible = codecs.lookup(str(options["encoding"])).encode("\n")[0] == b"\n"
        except LookupError:
            return "encoding", f"unknown encoding {options['encoding']!r}"
        if not ascii_compatible:
            return (
                "encoding",
                "JSON lines are read line by line: use an encoding where a newline is one byte",
            )
        return None

    def describe(
        self,
        fs: Any,
        files: tuple[InputFile, ...],
        options: dict[str, Any],
        dtypes: Mapping[str, str],
    ) -> Source:
        """The schema of the objects in the first MiB."""
        schema = {**_sample_schema(read_sample(fs, files), options), **dtypes}
        return Source(self.name, fs, files, (), options, schema, has_header=False)

    def partition(self, source: Source, blocksize: int) -> Source:
        """Byte blocks, cut at the first newline after each nominal start."""
        return replace(source, parts=tuple(byte_blocks(source.files, blocksize)))

    def read(self, source: Source, part: Part) -> RawPart:
        """``read_jsonl_part``."""
        return read_jsonl_part(source, part)

    def parsed_bytes(self, source: Source, part: Part) -> bytes | None:
        """A block's lines; None for a file read whole, whose hash says as much."""
        if part.length is None:
            return None
        with open_input(source, source.files[part.file]) as handle:
            return block_bytes(handle, part)
