"""Which client runs a build's tasks: the caller's, this process, a local cluster or a scheduler."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from datapipe.builder.cluster import dask_client, worker_server
from datapipe.builder.execution import Execution
from datapipe.builder.in_process import InProcessClient, small
from datapipe.errors import ConfigError
from datapipe.storage.fs import protocol_of


def in_process_only(fs: Any) -> bool:
    """memory:// lives in one process: workers must be threads to see it."""
    return protocol_of(fs) == "memory"


def open_client(
    stack: contextlib.ExitStack,
    execution: Execution,
    *,
    store_fs: Any,
    source_fs: Any,
    source_bytes: int,
    unread_bytes: int | None,
) -> tuple[Any, str]:
    """The client ``execution`` asks for and what it is ("client", "in-process", "local cluster"
    or "scheduler"); a cluster it starts stops with ``stack``. ``unread_bytes``: for a rebuild, the
    source bytes its parent's state does not cover."""
    if execution.client is not None:
        return execution.client, "client"
    workers, scheduler = execution.workers, execution.scheduler
    # with a scheduler, --workers sizes nothing
    if workers is not None and workers < 1 and scheduler is None:
        raise ConfigError(f"--workers {workers}: need at least one worker")
    if small(source_bytes, workers, scheduler, execution.memory_limit, unread_bytes):
        return InProcessClient(threads=workers or os.cpu_count() or 1), "in-process"
    # the embedded cluster's workers start from a forkserver that imports what they need meanwhile
    stack.enter_context(worker_server(enabled=scheduler is None and not in_process_only(store_fs)))
    processes = not (in_process_only(store_fs) or in_process_only(source_fs))
    client = dask_client(
        workers,
        scheduler,
        processes=processes,
        memory_limit=execution.memory_limit,
        scheduler_timeout=execution.scheduler_timeout,
        dashboard=execution.dashboard,
    )
    return stack.enter_context(client), "scheduler" if scheduler else "local cluster"
