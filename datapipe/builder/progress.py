"""How a build reports progress: a callback object the caller implements (the CLI draws bars with
it)."""

from __future__ import annotations


class BuildProgress:
    """Receives build events; every method is a no-op here, so callers override only what they
    show."""

    def dashboard(self, link: str | None) -> None:
        """The Dask dashboard of the cluster running the build (None when there is none)."""

    def phase(self, name: str, total: int) -> None:
        """A pass over the data starts: ``total`` tasks."""

    def advance(self, name: str, done: int = 1) -> None:
        """``done`` more tasks of phase ``name`` finished."""

    def message(self, text: str) -> None:
        """A line worth showing to the user."""
