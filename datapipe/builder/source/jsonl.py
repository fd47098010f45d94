"""JSON lines sources: one JSON object per line, in byte blocks cut at newlines."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
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
from datapipe.builder.source.schema import SchemaSample, infer_schema

# a JSON escape of a UTF-16 surrogate: paired, json.loads joins it to one character; alone, it
# stays a surrogate, which is not Unicode text and no column (Arrow's strings are UTF-8) can hold
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def lone_surrogate(line: bytes, record: Any) -> str | None:
    """The first lone surrogate that ``line``'s escapes put in ``record`` (as its escape), or None
    when there is none."""
    if not _SURROGATE_ESCAPE.search(line):
        return None
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        return f"\\u{ord(e.object[e.start]):04x}"
    return None


def _sample_schema(sample: bytes, options: Mapping[str, Any]) -> tuple[dict[str, str], int, int]:
    """(the types inferred from the objects of ``sample``, how many objects, the lines set
    aside)."""
    records, set_aside = [], 0
    for line in sample.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode(options.get("encoding") or DEFAULT_ENCODING))
        except ValueError:
            set_aside += 1
            continue
        if isinstance(record, dict) and lone_surrogate(line, record) is None:
            records.append(record)
        else:
            set_aside += 1
    if not records:
        return {}, 0, set_aside
    return infer_schema(pd.DataFrame.from_records(records)), len(records), set_aside


def read_jsonl_part(source: Source, part: Part) -> RawPart:
    """One JSON object per line (in ``options.encoding``, default UTF-8); a line that is not one is
    a reject."""
    with open_input(source, source.files[part.file]) as handle:
        data = block_bytes(handle, part)
    encoding = source.options.get("encoding") or DEFAULT_ENCODING
    records, rows, rejects, starts = [], [], [], []
    row = -1
    for number, line in enumerate(data.split(b"\n")):
        if not line.strip():
            continue
        row += 1
        starts.append(number)
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
        if (surrogate := lone_surrogate(line, record)) is not None:
            why = f"a lone surrogate ({surrogate}) in a string: not Unicode text; drop it or give"
            rejects.append((row, f"{why} the pair it belongs to", line.decode(encoding)))
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
    lines = np.array(starts, dtype=np.int64)
    return typed(source, RawPart(frame, row + 1, rejects, lines, data.count(b"\n")), strings=False)


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
        label, data = read_sample(fs, files)
        inferred, rows, set_aside = _sample_schema(data, options)
        sample = SchemaSample(label, len(data), rows, set_aside) if data else None
        schema = {**inferred, **dtypes}
        return Source(self.name, fs, files, (), options, schema, has_header=False, sample=sample)

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
