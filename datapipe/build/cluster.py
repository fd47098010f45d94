"""The Dask cluster a build runs on: an embedded LocalCluster, or an existing scheduler."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from collections.abc import Iterator
from typing import Any

from datapipe.errors import ConfigError


@contextlib.contextmanager
def dask_client(workers: int | None = None, scheduler: str | None = None, *,
                processes: bool = True) -> Iterator[Any]:
    """A distributed Client: connected to ``scheduler``, or to a new LocalCluster of ``workers`` processes.

    ``processes=False`` runs the workers as threads of this process: needed when the data lives
    in this process's memory (memory:// stores).
    """
    from distributed import Client, LocalCluster

    if not logging.getLogger().isEnabledFor(logging.INFO):
        logging.getLogger("distributed").setLevel(logging.WARNING)  # its INFO lines drown a build's own output
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as e:
            raise ConfigError(f"--scheduler {scheduler}: cannot connect to a Dask scheduler there ({e})") from None
        with client:
            yield client
        return
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers}: need at least one worker")
    dashboard = ":0" if importlib.util.find_spec("bokeh") else None
    with LocalCluster(
        n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=processes,
        # workers log recoverable trouble (a peer that died mid-transfer) as ERROR with a traceback; Dask
        # recomputes what was lost, and what cannot be recovered reaches the user as a BuildError
        dashboard_address=dashboard, silence_logs=logging.CRITICAL,
    ) as cluster, Client(cluster) as client:
        yield client


def dashboard_link(client: Any) -> str | None:
    """The dashboard URL of the client's cluster, when it serves one."""
    try:
        return client.dashboard_link if client.scheduler_info().get("services", {}).get("dashboard") else None
    except Exception:  # an old or remote scheduler without the info
        return None
