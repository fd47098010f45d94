"""Where a build's rejected rows' data (each row as JSON) is until its quarantine is written: in a
file the task that rejected them wrote into the partial version (``RejectsAt``), or in the parent
version's quarantine (a partition that carries over). The client holds the rejects' stage, reason
and place, and reads their data one partition at a time as the quarantine is written: a
near_dedupe stage rejects the text of every document it removes, more than one process may hold,
and more than the workers may keep until the end of the build."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from datapipe.builder.quarantine import Reject, write_data
from datapipe.errors import IntegrityError
from datapipe.storage.fs import open_atomic
from datapipe.versioning.rejected import read_data

SCRATCH = "rejects"  # the directory of the partial version the tasks write into
MEASURED, DUPLICATES = "measure", "duplicates"  # the passes that leave rejects' data there


def without_data(rejects: Sequence[Reject]) -> list[Reject]:
    """``rejects`` without their data, for the client."""
    return [replace(r, data=None) for r in rejects]


@dataclass(frozen=True)
class RejectsAt:
    """Where a build's tasks leave their rejects' data: a directory of its partial version (gone
    with it, when the version is committed or the build fails)."""

    fs: Any
    directory: str

    def kept(self, kind: str, part: int, rejects: Sequence[Reject]) -> list[Reject]:
        """``rejects`` without their data, which goes to the file of ``kind`` (MEASURED,
        DUPLICATES) of partition ``part`` here (where there is any)."""
        if rejects:
            with open_atomic(self.fs, self.path(kind, part)) as f:
                write_data(f, [r.data for r in rejects])
        return without_data(rejects)

    def path(self, kind: str, part: int) -> str:
        """The file of the data of partition ``part``'s rejects of ``kind``."""
        return f"{self.directory}/{SCRATCH}/{kind}-{part}.parquet"


@dataclass(frozen=True)
class InFile:
    """Data in the ``data`` column of the Parquet file ``path``: at ``rows`` (0-based), or all
    of it."""

    path: str
    rows: np.ndarray | None = None

    def read(self, fs: Any, last: dict[tuple[str, int], Any] | None = None) -> list[str]:
        """The data, read from the row groups that hold its rows (``read_data``: ``last`` keeps
        the last one read)."""
        try:
            return read_data(fs, self.path, self.rows, last)
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
            raise IntegrityError(
                f"{self.path}: the data of rejected rows could not be read ({e}); run the build "
                "again (where this is the latest version's rejected.parquet: with it moved aside, "
                "the build measures every partition afresh)"
            ) from None


@dataclass
class RejectData:
    """Per partition, where its rejects' data is: files in their order."""

    pieces: dict[int, list[InFile]] = field(default_factory=dict)

    def add(self, part: int, piece: InFile) -> None:
        """``piece`` holds the data of partition ``part``'s next rejects."""
        self.pieces.setdefault(part, []).append(piece)

    def filler(self, fs: Any) -> Callable[[int, Sequence[Reject]], list[Reject]]:
        """A function that gives partition ``part``'s ``rejects`` their data; called for the
        partitions in order, it reads each row group of a parent's quarantine once."""
        last: dict[tuple[str, int], Any] = {}

        def fill(part: int, rejects: Sequence[Reject]) -> list[Reject]:
            data = [d for p in self.pieces.get(part, ()) for d in p.read(fs, last)]
            if len(data) != len(rejects):  # a bug, never the user's input
                raise AssertionError(f"partition {part}: {len(rejects)} rejects, {len(data)} data")
            return [replace(r, data=d) for r, d in zip(rejects, data, strict=True)]

        return fill
