"""What a near_dedupe stage (builder/near_dedupe/) does to one partition: which rows stay, and
why each other one went (its reason in the quarantine); and the documents it signed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class Removal:
    """A partition's keep-mask at a near_dedupe stage and, in row order, the reason of each row
    it removes."""

    keep: np.ndarray
    reasons: tuple[str, ...] = ()

    def digest_bytes(self) -> bytes:
        """The reasons as bytes, for a partition identity: a kept document's new key changes the
        quarantine of the rows that name it."""
        return "\n".join(self.reasons).encode()


@dataclass(frozen=True)
class Signed:
    """A partition's documents at a near_dedupe stage: their signatures (rows x hashes, uint32)
    and labels (the sample key, or FILE#row where the key column is not there yet)."""

    signatures: np.ndarray
    labels: np.ndarray  # str

    def __len__(self) -> int:
        return len(self.labels)

    def __sizeof__(self) -> int:
        # Dask sizes a worker's held results with sys.getsizeof: without this, a block of
        # signatures counts as a few bytes, is never spilled, and the workers holding them pause
        return object.__sizeof__(self) + self.signatures.nbytes + self.labels.nbytes


class Stored(Protocol):
    """Signed documents kept elsewhere (a spool, a build state file), read where they are needed."""

    def load(self) -> Signed:
        """The signed documents, read."""
        ...
