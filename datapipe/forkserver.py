"""The process's multiprocessing forkserver, read and stopped through CPython's internals."""

from __future__ import annotations

from multiprocessing import forkserver
from typing import Any

# multiprocessing keeps one forkserver per process and offers no public way to ask whether it runs
# or what it will import, nor to stop it. The builder's cluster and the loader's DataLoader both
# start workers from it; this is the one place that reaches into it. Where the private attributes
# differ (another Python), the answers leave the server alone: not idle, nothing stopped.


def _server() -> Any:
    return getattr(forkserver, "_forkserver", None)


def idle() -> bool:
    """Whether the forkserver has not started yet, so that what it preloads may still change."""
    server = _server()
    return server is not None and getattr(server, "_forkserver_pid", False) is None


def preload_list() -> list[str]:
    """The modules the forkserver imports when it starts (multiprocessing's default:
    ``__main__``)."""
    return list(getattr(_server(), "_preload_modules", None) or ["__main__"])


def stop() -> bool:
    """Stop the forkserver (the next start is a fresh one); False where this Python has no way."""
    server = _server()
    if server is None or not hasattr(server, "_stop"):
        return False
    server._stop()
    return True
