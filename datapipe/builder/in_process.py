"""The build's client for small sources: Dask's synchronous scheduler in this process, no worker
processes.

Starting a LocalCluster (a scheduler, worker processes and their imports) costs more than building a
small source; below SMALL_BUILD_BYTES of source the build runs its passes here instead, and so does
a rebuild with less than that to read anew. The passes and their order are the same, so the version
is the same, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# of source files, below which a build without --workers/--scheduler stays here
SMALL_BUILD_BYTES = 64 << 20


def _sync(*args: Any, **kwargs: Any) -> Any:
    """Dask's synchronous scheduler, passed as a function: by name, dask would import distributed to
    look for a client first."""
    from dask.local import get_sync

    return get_sync(*args, **kwargs)


def _threads(*args: Any, **kwargs: Any) -> Any:
    """Dask's threaded scheduler, passed as a function (see ``_sync``)."""
    from dask.threaded import get

    return get(*args, **kwargs)


class InProcessClient:
    """What a build asks of a distributed Client (compute, persist, gather, scheduler_info), done
    here."""

    def __init__(self, threads: int = 1) -> None:
        import psutil

        self.memory, self.threads = int(psutil.virtual_memory().total), max(1, threads)

    def compute(self, tasks: Sequence[Any]) -> list[Any]:
        """The values of ``tasks`` (computed now: nothing runs in the background)."""
        import dask

        return list(dask.compute(*tasks, scheduler=_sync))

    def run_each(self, tasks: Sequence[Any], done: Callable[[], None]) -> list[Any]:
        """The values of ``tasks``, on ``threads`` threads, calling ``done`` as each ends (for
        progress); what several tasks share is computed once."""
        import dask
        from dask.callbacks import Callback

        wanted = {task.key for task in tasks}

        def finished(key: Any, *_: Any) -> None:  # called on this thread, by the scheduler's loop
            if key in wanted:
                done()

        if self.threads == 1:
            with Callback(posttask=finished):
                return list(dask.compute(*tasks, scheduler=_sync))
        # a pool of its own, left only when its threads are done: when a task fails, dask raises at
        # once, and the tasks still running must not write into a partial version the build is about
        # to remove
        with (
            Callback(posttask=finished),
            ThreadPoolExecutor(self.threads, thread_name_prefix="datapipe-build") as pool,
        ):
            return list(dask.compute(*tasks, scheduler=_threads, pool=pool))

    def persist(self, collection: Any) -> Any:
        """``collection`` with its values computed, still usable as an argument of later tasks (not
        through ``dask.persist``, which imports distributed to look for a client)."""
        import uuid

        import dask
        from dask import delayed

        if not isinstance(collection, list):
            return self.persist([collection])[0]
        values = dask.compute(*collection, scheduler=_sync)
        return [delayed(v, name=f"persisted-{uuid.uuid4().hex}", traverse=False) for v in values]

    def gather(self, values: Any) -> Any:
        """Values are here already."""
        return values

    def scheduler_info(self) -> dict[str, Any]:
        """A 'worker' per thread, the machine's memory shared among them (what a LocalCluster of
        that many workers would get): the build sizes its partitions to what one thread's task may
        hold."""
        share = self.memory // self.threads
        return {
            "workers": {
                f"in-process-{i}": {"memory_limit": share, "status": "running"}
                for i in range(self.threads)
            },
            "services": {},
        }


def small(
    source_bytes: int,
    workers: int | None,
    scheduler: str | None,
    memory_limit: int | None = None,
    unread_bytes: int | None = None,
) -> bool:
    """Whether a build runs in process: a small source and no cluster asked for; or, without a
    scheduler or a worker memory limit, a rebuild whose parent vouches for all its partitions but
    ``unread_bytes`` of source (``--workers`` then only sizes a cluster that the build does not
    need)."""
    if scheduler is not None or memory_limit is not None:
        return False
    if unread_bytes is not None and unread_bytes < SMALL_BUILD_BYTES:
        return True
    return workers is None and source_bytes < SMALL_BUILD_BYTES
