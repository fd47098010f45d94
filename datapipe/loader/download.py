"""Download ahead: fetch the next shards a consumer will read into the cache while it reads the
current ones."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator

from datapipe.loader.shard_set import Files
from datapipe.storage.cache import CachedFile

log = logging.getLogger(__name__)


def first_uses(shards_per_step: Iterable[Iterable[int]]) -> Iterator[int]:
    """Shard ids in the order a consumer first needs them."""
    seen: set[int] = set()
    for shards in shards_per_step:
        for shard in shards:
            if shard not in seen:
                seen.add(shard)
                yield shard


class Downloader:
    """A thread that keeps up to ``ahead`` shards beyond the consumer's current ones in the cache.

    A shard fetched ahead stays locked (shared) until the consumer has opened it, so that eviction
    cannot throw away a download before it is used: the cache holds the consumer's shards plus at
    most ``ahead`` more. Errors are left for the consumer's own read to raise (it names the shard);
    the thread only logs them, so a failed prefetch never hides or doubles an error.
    """

    def __init__(self, files: Files, order: Iterable[int], ahead: int) -> None:
        self.files = files
        self.ahead = ahead
        self._order = iter(order)
        self._started = 0  # shards the consumer has opened
        self._consumed: set[int] = set()
        # a shard's held copies: the shard, its index, its companions
        self._held: dict[int, tuple[CachedFile, ...]] = {}
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="datapipe-download", daemon=True)
        self._thread.start()

    def consumed(self, shard: int) -> None:
        """The consumer has opened ``shard`` (and holds its own lock on it): ours can go."""
        with self._cond:
            self._started += 1
            self._consumed.add(shard)
            held = self._held.pop(shard, ())
            self._cond.notify()
        for cached in held:
            cached.close()

    def _run(self) -> None:
        for n, shard in enumerate(self._order):
            with self._cond:
                while not self._stop and n >= self._started + self.ahead:
                    self._cond.wait()
                if self._stop:
                    return
                if shard in self._consumed:  # the consumer got there first
                    continue
            try:
                files, number = self.files.part(shard)
                held = files.fetch(number)
            except Exception as e:  # the consumer's read of this shard will raise it properly
                log.debug("download ahead of shard %d failed: %s", shard, e)
                continue
            with self._cond:
                keep = not self._stop and shard not in self._consumed
                if keep:
                    self._held[shard] = held
            if not keep:
                for cached in held:
                    cached.close()

    def close(self) -> None:
        """Stop fetching and let go of what was fetched but not read."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=5)
        with self._cond:
            held, self._held = list(self._held.values()), {}
        for copies in held:
            for cached in copies:
                cached.close()
