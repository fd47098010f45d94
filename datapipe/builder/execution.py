"""How a build runs: the settings that shape its work and never its version."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Execution:
    """Where a build's tasks run and what it may skip; the version is the same under any of these.

    ``client``: an existing distributed Client to run on (tests, notebooks). Otherwise
    ``scheduler`` names a running Dask scheduler, or a LocalCluster of ``workers`` processes
    starts; a source under SMALL_BUILD_BYTES with neither ``workers``, ``scheduler`` nor
    ``memory_limit`` is built in this process (builder/in_process.py).
    ``scheduler_timeout``: seconds to keep trying to reach ``scheduler``
    (cluster.SCHEDULER_TIMEOUT).
    ``memory_limit``: bytes per worker of the embedded LocalCluster (Dask's default otherwise: the
    machine's memory shared among the workers).
    ``dashboard``: the embedded LocalCluster serves Dask's dashboard, and the link to the dashboard
    of the cluster the build runs on goes to the progress (None without).
    ``keep_encoded``: whether the workers hold the encoded samples between the measure and the
    write pass instead of reading the source twice; by default, when they fit
    (``sizing.fit_to_workers``).
    ``rehash``: read every source file for its hash, trusting no stamp of the parent's
    (builder/known_hashes.py).
    ``storage_options``: fsspec options for reading the source, over those of the pipeline's
    ``source.options.storage_options``.
    """

    client: Any = field(default=None, compare=False)
    workers: int | None = None
    scheduler: str | None = None
    scheduler_timeout: float | None = None
    memory_limit: int | None = None
    dashboard: bool = False
    keep_encoded: bool | None = None
    rehash: bool = False
    storage_options: Mapping[str, Any] | None = field(default=None, compare=False)


# every setting at its default: the size of the source and the machine decide
DEFAULT_EXECUTION = Execution()
