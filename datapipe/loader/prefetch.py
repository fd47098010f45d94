"""Run an iterator ahead in a background thread, through a bounded queue (memory: ``depth``
items)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def prefetch(items: Iterable[Any], depth: int) -> Iterator[Any]:
    """Yield ``items`` in order while a thread produces up to ``depth`` of them ahead.

    An exception in the producer is raised here, in the consumer. Closing the generator early
    stops the producer at its next item.
    """
    if depth <= 0:
        yield from items
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as e:  # handed to the consumer, raised there
            put(_Failure(e))

    thread = threading.Thread(target=produce, name="datapipe-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)
