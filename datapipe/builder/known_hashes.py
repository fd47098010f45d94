"""Source hashes a rebuild takes from its parent's build state instead of reading the files again.

A local file is trusted unread when its stamp (device, inode, size, mtime and ctime in ns, taken
when it was listed) equals the one recorded with its hash, and it had last changed at least RACY_NS
before the build that hashed it listed it. Any write to a file sets its ctime to the clock's time,
which no user call can set back; so a file changed after it was hashed has another stamp, unless the
change fell in the same clock tick as the recorded ctime, which the margin rules out (git's "racily
clean" index entries). Object stores need none of this: their etags stand for the bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from datapipe.builder.lineage import hash_tasks
from datapipe.builder.result import SourceFileCounts
from datapipe.versioning.manifest import SourceFile

RACY_NS = 2 * 10**9  # a file changed this close before it was hashed is hashed again next time


def _ctime_ns(stamp: str) -> int:
    return int(stamp.rsplit(":", 1)[1])


def trusted(records: Mapping[str, Sequence[Any]], files: Sequence[Any]) -> dict[int, SourceFile]:
    """file index -> its hash from ``records`` (label -> [stamp, hash, listed_ns]) where the stamp
    vouches for it."""
    out = {}
    for i, f in enumerate(files):
        record = records.get(f.label)
        if f.stamp is None or record is None:
            continue
        stamp, digest, listed_ns = record
        if stamp == f.stamp and _ctime_ns(stamp) < int(listed_ns) - RACY_NS:
            out[i] = SourceFile(f.label, f.size, digest)
    return out


def records(
    files: Sequence[Any],
    hashes: Sequence[SourceFile],
    listed_ns: int,
    parent: Mapping[str, Sequence[Any]],
    reused: Mapping[int, SourceFile],
) -> dict[str, list[Any]]:
    """The records a build leaves for the next: every stamped file's stamp, hash and when it was
    hashed (a reused hash keeps the listing time of the build that read the file)."""
    out = {}
    for i, (f, h) in enumerate(zip(files, hashes, strict=True)):
        if f.stamp is not None:
            out[f.label] = [f.stamp, h.hash, parent[f.label][2] if i in reused else listed_ns]
    return out


class SourceHashes:
    """Every source file's hash: the trusted ones (``trusted``) as they are, the rest from tasks on
    ``client``, started now and gathered when first asked for (the passes run meanwhile)."""

    def __init__(
        self, client: Any, source: Any, known: Mapping[int, SourceFile], listed_ns: int
    ) -> None:
        self.client, self.known, self.files, self.listed_ns = (
            client,
            dict(known),
            source.files,
            listed_ns,
        )
        self.count = len(source.files)
        unread = [f for i, f in enumerate(source.files) if i not in self.known]
        self._pending = client.compute(hash_tasks(source.fs, unread)) if unread else []
        self._all: list[SourceFile] | None = None

    def all(self) -> list[SourceFile]:
        """Every file's SourceFile, in source order."""
        if self._all is None:
            computed = iter([h for group in self.client.gather(self._pending) for h in group])
            self._all = [
                self.known[i] if i in self.known else next(computed) for i in range(self.count)
            ]
        return self._all

    def report(self) -> SourceFileCounts:
        """How many files were read for their hash and how many the parent's records vouched for."""
        return SourceFileCounts(hashed=self.count - len(self.known), trusted=len(self.known))

    def records(self, parent: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
        """The records this build leaves for the next (``records``), given the parent's."""
        return records(self.files, self.all(), self.listed_ns, parent, self.known)
