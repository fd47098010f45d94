"""Download ahead: fetch the next shards a consumer will read into the cache while it reads the current ones."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator

from datapipe.loader.dataset import Dataset

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
    """A thread that keeps up to ``ahead`` shards beyond the consumer's current one in the cache.

    Errors are left for the consumer's own read to raise (it names the shard); the thread only
    logs them, so a failed prefetch never hides or doubles an error.
    """

    def __init__(self, dataset: Dataset, order: Iterable[int], ahead: int) -> None:
        self.dataset = dataset
        self.ahead = ahead
        self._order = iter(order)
        self._started = 0  # shards the consumer has opened
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="datapipe-download", daemon=True)
        self._thread.start()

    def consumed(self) -> None:
        """The consumer opened its next shard."""
        with self._cond:
            self._started += 1
            self._cond.notify()

    def _run(self) -> None:
        for n, shard in enumerate(self._order):
            with self._cond:
                while not self._stop and n >= self._started + self.ahead:
                    self._cond.wait()
                if self._stop:
                    return
            try:
                for cached in self.dataset.fetch(shard):
                    cached.close()  # in the cache now; the reader takes its own lock when it opens it
            except Exception as e:  # the consumer's read of this shard will raise it properly
                log.debug("download ahead of shard %d failed: %s", shard, e)

    def close(self) -> None:
        """Stop fetching."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=5)
