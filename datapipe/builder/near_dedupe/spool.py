"""A near_dedupe stage's signed partitions on their way to the build state: fetched from the
workers one at a time once the stage has its removals, into a temporary file on the client's
machine, and read back one at a time as the state is saved. Neither the client's memory nor the
workers' holds all of them while the build goes on."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from datapipe.builder.removals import Signed


class Spool:
    """A temporary file of signed partitions, written in order, read back by position from any
    thread."""

    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="datapipe-signatures-")
        self._lock = threading.Lock()

    def put(self, signed: Signed) -> Spooled:
        """``signed`` written at the end of the file."""
        with self._lock:
            self._file.seek(0, 2)
            at = self._file.tell()
            np.save(self._file, signed.signatures, allow_pickle=False)
            np.save(self._file, signed.labels, allow_pickle=False)
        return Spooled(self, at)

    def get(self, at: int) -> Signed:
        """The signed partition written at ``at``."""
        with self._lock:
            self._file.seek(at)
            signatures = np.load(self._file, allow_pickle=False)
            return Signed(signatures, np.load(self._file, allow_pickle=False))


@dataclass(frozen=True)
class Spooled:
    """One signed partition in a ``Spool``."""

    spool: Spool
    at: int

    def load(self) -> Signed:
        """The signed partition, read back."""
        return self.spool.get(self.at)


def spooled(kept: Sequence[Any], fetch: Callable[[Any], Signed]) -> list[Spooled]:
    """Kept tasks of signed partitions, each fetched (``PassRunner.fetch``) and spooled in turn."""
    spool = Spool()
    return [spool.put(fetch(task)) for task in kept]
