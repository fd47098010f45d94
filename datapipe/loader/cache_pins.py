"""The shards a consumer pins while it reads them: downloaded ahead, read pages unmapped, cached
shards given back to the cache as soon as it is done with them."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from datapipe.loader.download import Downloader
from datapipe.loader.shard_set import Files

DROP_BYTES = 8 << 20  # a consumer unmaps the shard pages it has read once they add up to this


class CachePins:
    """The shards of ``files`` one consumer pins, from first read to release, while it makes batches
    of them (a version's lease, versioning/leases.py, keeps the version itself from gc).

    The consumer calls ``opened`` after each read and ``read`` once the batch is made, then
    ``close``. Resident memory stays at the pages of the last ``drop_bytes`` read (DROP_BYTES, or a
    window's bytes for packed rows), not of every shard read so far. With ``done_at`` (per shard,
    the epoch position from which the consumer reads it no more; for a cached dataset), a shard
    goes back to the cache as soon as the consumer's next read starts at or past it, so the cache
    holds the shards in use plus those ``upcoming`` ones downloaded ``ahead``.
    """

    def __init__(
        self,
        files: Files,
        sample_bytes: float,
        done_at: np.ndarray | None = None,
        upcoming: Iterable[int] | None = None,
        ahead: int = 0,
        drop_bytes: float = DROP_BYTES,
    ) -> None:
        self.files = files
        self.drop_bytes = drop_bytes
        self.done_at = done_at
        self.downloader = None
        if upcoming is not None and ahead:
            self.downloader = Downloader(files, upcoming, ahead)
        self._opened: set[int] = set()  # shards the downloader was told about
        self._in_use: set[int] = set()  # shards to give back
        self._mapped: set[int] = set()  # shards read from since pages were last unmapped
        self._unmapped_bytes = 0.0
        self._sample_bytes = sample_bytes  # of a sample of ``files``: what a read maps

    @property
    def releases(self) -> bool:
        """Whether shards are given back as the consumer passes them (``read`` needs its next
        position)."""
        return self.done_at is not None

    def opened(self, shard_ids: np.ndarray) -> None:
        """The consumer has read from ``shard_ids`` and holds them now: the downloader's own hold on
        them goes."""
        if self.downloader is None:
            return
        for shard in dict.fromkeys(shard_ids.tolist()):
            if shard not in self._opened:
                self._opened.add(shard)
                self.downloader.consumed(shard)

    def read(self, shard_ids: np.ndarray, until: int | None) -> None:
        """A batch of ``shard_ids`` is made: unmap read pages past ``drop_bytes``, and give back the
        shards done before epoch position ``until``, the consumer's next read (None: it reads no
        more)."""
        shards = shard_ids.tolist()
        self._mapped.update(shards)
        self._unmapped_bytes += len(shards) * self._sample_bytes
        if self._unmapped_bytes >= self.drop_bytes:
            for shard in self._mapped:
                files, number = self.files.part(shard)
                files.reader(number).drop_pages()
            self._mapped.clear()
            self._unmapped_bytes = 0
        if self.done_at is not None:
            done_at = self.done_at
            self._in_use.update(shards)
            for shard in [s for s in self._in_use if until is None or done_at[s] <= until]:
                self._in_use.discard(shard)
                self._mapped.discard(shard)
                self._release(shard)

    def close(self) -> None:
        """Stop downloading; give back what is still held (a consumer that stopped early)."""
        if self.downloader is not None:
            self.downloader.close()
        for shard in self._in_use:
            self._release(shard)
        self._in_use.clear()

    def _release(self, shard: int) -> None:
        files, number = self.files.part(shard)
        files.release(number)
