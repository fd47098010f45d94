"""The Dask cluster a build runs on: an embedded LocalCluster, or an existing scheduler."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from collections.abc import Iterator
from typing import Any

from datapipe.errors import ConfigError

# seconds to keep trying to reach a --scheduler (Dask retries refused connections)
SCHEDULER_TIMEOUT = 10.0


def _unreachable(scheduler: str, timeout: float, error: BaseException) -> str:
    # Dask's TimeoutError is bare when the TCP connection was made but the handshake did not
    # finish in time: a busy or stuck scheduler, not a missing one
    why = str(error) or f"it accepted the connection but did not answer within {timeout:g} s"
    return (
        f"--scheduler {scheduler}: cannot connect to a Dask scheduler there "
        f"({why}); check the address, "
        "or give a busy scheduler longer with --scheduler-timeout"
    )


def check_scheduler(scheduler: str, timeout: float) -> None:
    """A ConfigError unless a Dask scheduler at ``scheduler`` answers within ``timeout`` seconds.

    distributed's Client waits for ever on a peer that takes the connection and never answers
    (a stuck scheduler, or another server on that port), so the build asks first, with a deadline
    of its own, on a thread: the caller may be inside a running event loop (a notebook).
    """
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed.core import rpc

    async def identity() -> Any:
        async with rpc(scheduler, timeout=timeout) as scheduler_rpc:
            return await scheduler_rpc.identity()

    with ThreadPoolExecutor(1) as pool:
        # the deadline leaves the connection its own timeout first, so a refusal is named as one
        try:
            pool.submit(asyncio.run, asyncio.wait_for(identity(), 2 * timeout + 1)).result()
        except ValueError as e:
            raise ConfigError(
                f"--scheduler {scheduler}: not a Dask scheduler address ({e}); give one "
                "like tcp://HOST:8786"
            ) from None
        except (OSError, TimeoutError) as e:
            raise ConfigError(_unreachable(scheduler, 2 * timeout + 1, e)) from None


def _check_memory_limit(scheduler: str | None, memory_limit: int | None) -> None:
    """A ConfigError for a memory limit the embedded cluster cannot take."""
    if scheduler and memory_limit is not None:
        raise ConfigError(
            "--memory-limit sizes the workers of the embedded cluster; with "
            "--scheduler, give it to "
            "the workers you start (dask worker --memory-limit ...)"
        )
    if memory_limit is not None and memory_limit < 1:
        raise ConfigError(f"--memory-limit {memory_limit}: must be at least 1 byte")


@contextlib.contextmanager
def _connected(scheduler: str, scheduler_timeout: float | None) -> Iterator[Any]:
    """A Client of the Dask scheduler at ``scheduler``, trying for ``scheduler_timeout`` seconds
    (default SCHEDULER_TIMEOUT) to reach it."""
    from distributed import Client

    timeout = SCHEDULER_TIMEOUT if scheduler_timeout is None else scheduler_timeout
    if not timeout > 0:
        raise ConfigError(f"--scheduler-timeout {timeout:g}: must be more than 0 seconds")
    check_scheduler(scheduler, timeout)
    try:
        client = Client(scheduler, timeout=timeout)
    except (OSError, TimeoutError) as e:
        raise ConfigError(_unreachable(scheduler, timeout, e)) from None
    with client:
        yield client


@contextlib.contextmanager
def dask_client(
    workers: int | None = None,
    scheduler: str | None = None,
    *,
    processes: bool = True,
    memory_limit: int | None = None,
    scheduler_timeout: float | None = None,
    dashboard: bool = False,
) -> Iterator[Any]:
    """A distributed Client: connected to ``scheduler``, or to a new LocalCluster of ``workers``
    processes.

    ``processes=False`` runs the workers as threads of this process: needed when the data lives
    in this process's memory (memory:// stores). ``memory_limit``: bytes per worker of the
    LocalCluster (Dask spills at 60% of it, pauses at 80% and restarts a worker at 95%); None
    leaves Dask's default, the machine's memory shared among the workers. ``scheduler_timeout``:
    seconds to keep trying to connect to ``scheduler`` (default SCHEDULER_TIMEOUT). ``dashboard``:
    the LocalCluster serves Dask's dashboard (on a free port; needs bokeh).
    """
    from distributed import Client, LocalCluster

    if not logging.getLogger().isEnabledFor(logging.INFO):
        # its INFO lines drown a build's own output
        logging.getLogger("distributed").setLevel(logging.WARNING)
    _check_memory_limit(scheduler, memory_limit)
    if scheduler:
        with _connected(scheduler, scheduler_timeout) as client:
            yield client
        return
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers}: need at least one worker")
    # the Bokeh server of the dashboard is a sizeable part of the cluster's start: only a build that
    # shows its link asks for it. Without it the scheduler still serves its health and metrics
    # routes, on a free loopback port.
    dashboard = dashboard and importlib.util.find_spec("bokeh") is not None
    with (
        _forkserver_workers(),
        LocalCluster(
            n_workers=workers or os.cpu_count() or 1,
            threads_per_worker=1,
            processes=processes,
            # workers log recoverable trouble (a peer that died mid-transfer) as ERROR with a
            # traceback; Dask recomputes what was lost, and what cannot be recovered reaches the
            # user as a BuildError
            dashboard_address=":0" if dashboard else "127.0.0.1:0",
            scheduler_kwargs={"dashboard": dashboard},
            silence_logs=logging.CRITICAL,
            **({"memory_limit": memory_limit} if memory_limit is not None else {}),
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


# What a worker needs for its first task, imported once by the forkserver its processes are forked
# from: the modules of the tasks (passes and the source readers they call, the quote scan, the
# source hashes)
WORKER_PRELOAD = [
    "distributed",
    "numpy",
    "pandas",
    "pyarrow.parquet",
    "datapipe.builder.passes",
    "datapipe.builder.source.align",
    "datapipe.builder.lineage",
]


def _forkserver_available() -> bool:
    """Whether the embedded cluster's workers start from a forkserver (see
    ``_forkserver_workers``)."""
    import multiprocessing

    import dask

    # Dask's default
    return (
        dask.config.get("distributed.worker.multiprocessing-method", "spawn") == "spawn"
        and "forkserver" in multiprocessing.get_all_start_methods()
    )


@contextlib.contextmanager
def worker_server(enabled: bool = True) -> Iterator[None]:
    """Start the forkserver the embedded cluster's workers will come from, and let it import
    WORKER_PRELOAD while this process opens the build's source (it imports in the background; a
    worker's start waits for it).

    The forkserver is stopped on the way out if this started it: a forkserver keeps the environment
    it started with, so one left running would give later workers (this process's next build, or a
    Loader's DataLoader workers, which fork from the same server) stale variables such as S3
    credentials.
    """
    from multiprocessing import forkserver

    import datapipe.forkserver

    # the process's one forkserver; where it cannot be read, the start is left to Dask
    started = enabled and _forkserver_available() and datapipe.forkserver.idle()
    preload = datapipe.forkserver.preload_list()
    if started:
        forkserver.set_forkserver_preload(WORKER_PRELOAD)
        forkserver.ensure_running()
    try:
        yield
    finally:
        if started and datapipe.forkserver.stop():
            # and the preload list as it was: the cluster's start set Dask's own (every package
            # distributed knows), which a later forkserver, such as a remote Loader's, would import
            # for nothing
            forkserver.set_forkserver_preload(preload)


@contextlib.contextmanager
def _forkserver_workers() -> Iterator[None]:
    """Start the LocalCluster's workers from a forkserver rather than by spawning each.

    Dask spawns a fresh interpreter per worker by default, and each imports distributed, numpy and
    pandas, then pyarrow and datapipe in its first task. A forkserver imports them once, while the
    build opens its source (``worker_server``), and a worker is a fork of it. A method the user
    configured other than Dask's default is kept.
    """
    import dask

    if not _forkserver_available():
        yield
        return
    with (
        worker_server(),
        dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}),
    ):
        yield


def dashboard_link(client: Any) -> str | None:
    """The dashboard URL of the client's cluster, when it serves one."""
    try:
        return (
            client.dashboard_link
            if client.scheduler_info().get("services", {}).get("dashboard")
            else None
        )
    except Exception:  # an old or remote scheduler without the info
        return None


def worker_memory_limits(client: Any) -> list[int]:
    """Each worker's memory limit in bytes (0 where a worker has none)."""
    return [w.get("memory_limit") or 0 for w in client.scheduler_info().get("workers", {}).values()]


def _own_peak_rss() -> int:
    """This process's peak resident memory, in bytes (Linux reports KiB)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def worker_peak_rss(client: Any) -> int | None:
    """The largest peak resident memory among the client's workers, in bytes (None where it cannot
    be asked)."""
    run = getattr(client, "run", None)
    if run is None:  # the in-process client: its one worker is this process
        return _own_peak_rss()
    try:
        return max(run(_own_peak_rss).values(), default=None)
    except Exception:  # a scheduler that refuses client.run, or a worker that went away at the end
        return None
