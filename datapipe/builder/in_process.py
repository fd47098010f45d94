"""The build's client for small sources: Dask's synchronous scheduler in this process, no worker processes.

Starting a LocalCluster (a scheduler, worker processes and their imports) costs more than building a
small source; below SMALL_BUILD_BYTES of source the build runs its passes here instead. The passes
and their order are the same, so the version is the same, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

SMALL_BUILD_BYTES = 64 << 20  # of source files, below which a build without --workers/--scheduler stays here


class InProcessClient:
    """What a build asks of a distributed Client (compute, persist, gather, scheduler_info), done here."""

    def __init__(self) -> None:
        import psutil

        self.memory = int(psutil.virtual_memory().total)

    def compute(self, tasks: Sequence[Any]) -> list[Any]:
        """The values of ``tasks`` (computed now: nothing runs in the background)."""
        import dask

        return list(dask.compute(*tasks, scheduler="sync"))

    def run_each(self, tasks: Sequence[Any], done: Callable[[], None]) -> list[Any]:
        """The values of ``tasks``, one after the other, calling ``done`` after each (for progress)."""
        import dask

        results = []
        for task in tasks:
            (value,) = dask.compute(task, scheduler="sync")
            results.append(value)
            done()
        return results

    def persist(self, collection: Any) -> Any:
        """``collection`` with its values computed, still usable as an argument of later tasks."""
        import dask

        persisted = dask.persist(*collection, scheduler="sync") if isinstance(collection, list) \
            else dask.persist(collection, scheduler="sync")
        return list(persisted) if isinstance(collection, list) else persisted[0]

    def gather(self, values: Any) -> Any:
        """Values are here already."""
        return values

    def scheduler_info(self) -> dict[str, Any]:
        """One 'worker', this process, with the machine's memory (what a 1-worker LocalCluster would get)."""
        return {"workers": {"in-process": {"memory_limit": self.memory, "status": "running"}}, "services": {}}


def small(source_bytes: int, workers: int | None, scheduler: str | None) -> bool:
    """Whether a build runs in process: a small source, and no cluster asked for."""
    return workers is None and scheduler is None and source_bytes < SMALL_BUILD_BYTES
