"""Runs a build's passes (lists of Dask tasks) on its client, with progress and stall detection."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from datapipe.builder.in_process import InProcessClient
from datapipe.builder.progress import BuildProgress
from datapipe.errors import BuildError

T = TypeVar("T")

STALL_CHECK_SECONDS = 20
STALL_CHECKS = 3  # a minute without progress, workers paused or gone
FOLLOW_POLL_SECONDS = 0.01  # how often a pass looks for finished tasks when none was ready
GATHER_AT_ONCE = 8  # results fetched in one request


class PassRunner:
    """Runs passes on ``client``, reporting each to ``progress`` and keeping each one's wall time in
    ``seconds``. ``ran_on`` says what the client is ("in-process", "local cluster", "scheduler" or
    "client": ``client.open_client``)."""

    def __init__(self, client: Any, progress: BuildProgress, ran_on: str = "client") -> None:
        self.client = client
        self.progress = progress
        self.ran_on = ran_on
        self.seconds: dict[str, float] = {}

    def __call__(self, phase: str, tasks: Sequence[Any]) -> list[Any]:
        """The results of ``tasks``, in order; a BuildError when a worker dies or the pass
        stalls."""
        self.progress.phase(phase, len(tasks))
        start = time.perf_counter()
        # no worker to die or stall: run the tasks here
        if isinstance(self.client, InProcessClient):
            results = self.client.run_each(list(tasks), lambda: self.progress.advance(phase, 1))
            self.seconds[phase] = time.perf_counter() - start
            return results
        from distributed.client import FutureCancelledError
        from distributed.scheduler import KilledWorker

        futures = self.client.compute(list(tasks))
        places: dict[Any, list[int]] = {}  # a task given twice is one future
        for i, f in enumerate(futures):
            places.setdefault(f.key, []).append(i)
        results: list[Any] = [None] * len(futures)
        try:
            self._follow(phase, futures, places, results)
            self.seconds[phase] = time.perf_counter() - start
            return results
        except (KilledWorker, FutureCancelledError) as e:
            raise BuildError(
                f"{phase}: a Dask worker died while running this pass ({type(e).__name__}: {e}); "
                "check the workers' memory limit, then run the build again"
            ) from None

    def timed(self, phase: str, step: Callable[..., T], *args: Any) -> T:
        """``step(*args)``, its wall time kept in ``seconds`` as ``phase`` (a step of the client,
        not a pass of tasks)."""
        start = time.perf_counter()
        value = step(*args)
        self.seconds[phase] = time.perf_counter() - start
        return value

    def share_job(self, job: Any) -> Any:
        """``job`` as an argument of later tasks, one copy per worker instead of one per task (a
        'files' source lists every file).

        Persisted as a graph literal, not scattered: the scheduler can re-create it when the worker
        holding it dies, where lost scattered data fails the build.
        """
        from dask import delayed

        return self.client.persist(delayed(job, name=f"build-job-{uuid.uuid4().hex}"))

    def keep(self, tasks: Sequence[Any]) -> list[Any]:
        """``tasks`` computed and held on the workers, as arguments of later tasks; what they hold
        is freed when the last reference to them goes."""
        return self.client.persist(list(tasks))

    def fetch(self, kept: Any) -> Any:
        """The value one kept task (``keep``) holds, brought here."""
        if isinstance(self.client, InProcessClient):
            return self.client.compute([kept])[0]
        return self.client.compute(kept).result()

    def _follow(
        self, phase: str, futures: list[Any], places: dict[Any, list[int]], results: list[Any]
    ) -> None:
        """Advance the progress as tasks finish; a pass whose workers all stay paused (Dask stops a
        worker whose memory passes its pause level, and memory a task left behind may never drop
        back) or that has no worker left is a BuildError, not a build that waits for ever.

        Each result is fetched as its task ends and the worker's copy let go (``results``, at
        ``places`` by key): a pass of many results no worker could hold all of still runs."""
        from distributed import as_completed

        # each future tracked once, not re-waited on
        finished = as_completed(list({f.key: f for f in futures}.values()), loop=self.client.loop)
        stalled, quiet_since = 0, time.monotonic()
        while not finished.is_empty():
            done = finished.next_batch(block=False)
            if done:
                # a few at a time: results held already (spilled, maybe) come back to memory to be
                # sent, and all of a pass's at once would not fit
                for lo in range(0, len(done), GATHER_AT_ONCE):
                    some = done[lo : lo + GATHER_AT_ONCE]
                    for future, value in zip(some, self.client.gather(some), strict=True):
                        for i in places[future.key]:
                            results[i] = value
                        future.release()
                self.progress.advance(phase, sum(len(places[f.key]) for f in done))
                stalled, quiet_since = 0, time.monotonic()
            elif time.monotonic() - quiet_since < STALL_CHECK_SECONDS:
                time.sleep(FOLLOW_POLL_SECONDS)
            else:
                quiet_since = time.monotonic()
                why = why_stuck(self.client.scheduler_info().get("workers", {}))
                stalled = stalled + 1 if why else 0
                if stalled >= STALL_CHECKS:
                    raise BuildError(
                        f"{phase}: {why} for {STALL_CHECKS * STALL_CHECK_SECONDS} s; give the "
                        "workers more memory (--memory-limit, fewer --workers) or use a smaller "
                        "source.options.blocksize, then run the build again"
                    )


BUSY = ("executing", "long-running", "flight")  # a worker's task states that are progress


def why_stuck(workers: Mapping[str, Any]) -> str | None:
    """Why a cluster of ``workers`` (the scheduler's ``workers`` info) cannot progress, or None:
    no worker left; every worker paused at its memory limit; or some paused and none of them all
    running or fetching a task (the others wait on what the paused ones hold)."""
    if not workers:
        return "no Dask worker is left"
    paused = sum(w.get("status") == "paused" for w in workers.values())
    if paused == len(workers):
        return "every Dask worker is paused at its memory limit"
    counts = [w.get("metrics", {}).get("task_counts", {}) for w in workers.values()]
    if paused and not any(c.get(state, 0) for c in counts for state in BUSY):
        return (
            f"{paused} of {len(workers)} Dask workers are paused at their memory limit and the "
            "others wait on them"
        )
    return None
