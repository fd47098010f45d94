"""The one exception tree of datapipe, each error with its CLI exit code; near-name hints."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence


class DatapipeError(Exception):
    """Base of every error datapipe raises on purpose.

    The CLI prints ``str(error)`` (never a traceback) and exits with ``exit_code``.
    """

    exit_code = 1


class ConfigError(DatapipeError):
    """A bad argument, option, pipeline file field or format name."""

    exit_code = 2


class NotFoundError(DatapipeError):
    """A file, shard, dataset, version or ref that does not exist."""

    exit_code = 3


class ShardCorruptError(DatapipeError):
    """A shard or index whose bytes cannot be what a writer produced.

    ``shard`` names the file and ``offset`` the byte where reading stopped (None when
    the problem is not at one place, e.g. a size mismatch). Built from one argument, that
    is the whole message (torch's DataLoader rebuilds a worker's exception from its text).
    """

    exit_code = 4

    def __init__(self, shard: str, message: str | None = None, offset: int | None = None) -> None:
        self.shard = shard
        self.message = message
        self.offset = offset
        if message is None:
            super().__init__(shard)
            return
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"{shard}{where}: {message}")

    def __reduce__(self) -> tuple:
        # pickled with the arguments it was made from (and its notes), so it crosses processes as
        # itself
        return type(self), (self.shard, self.message, self.offset), self.__dict__


class FormatVersionError(DatapipeError):
    """An on-disk file (index, manifest) written in a format version this datapipe does not know."""

    exit_code = 5


class IntegrityError(DatapipeError):
    """Stored bytes do not match their recorded hashes (what ``datapipe verify`` reports)."""

    exit_code = 6


class SampleError(DatapipeError):
    """A sample a shard format cannot store as given: a bad key, field name or value type."""

    exit_code = 7


class BuildError(DatapipeError):
    """A build that cannot finish: too many rejected rows, a user stage that raised, no samples
    left."""

    exit_code = 8


class UserCodeError(BuildError):
    """A map function that raised: the stage, function and exception, then the record that made it
    raise (its source file and row) and the frames of the user's own code.

    ``frames``: (file, line, function, source line) of the user's code only, outermost first;
    ``source`` and ``row``: the input file and 1-based row of the record (None when no one record
    raises alone); ``record``: that row as JSON. Pickled with its fields, so it crosses from a
    Dask worker as itself.
    """

    def __init__(
        self,
        head: str,
        frames: tuple[tuple[str, int, str, str], ...] = (),
        source: str | None = None,
        row: int | None = None,
        record: str | None = None,
    ) -> None:
        self.head, self.frames = head, tuple(tuple(f) for f in frames)
        self.source, self.row, self.record = source, row, record
        super().__init__(self._message())

    def _message(self) -> str:
        lines = [self.head]
        if self.source is not None:
            shown = (
                self.record
                if self.record is None or len(self.record) <= 300
                else (self.record[:297] + "...")
            )
            lines.append(
                f"  record: {self.source} row {self.row}" + (f": {shown}" if shown else "")
            )
        if self.frames:
            lines.append("  your code (most recent call last):")
            for file, line, function, text in self.frames:
                lines.append(
                    f"    {file}:{line} in {function}" + (f"\n      {text}" if text else "")
                )
        return "\n".join(lines)

    def located(self, source: str, row: int, record: str | None) -> UserCodeError:
        """This error with the record's place in its file."""
        return UserCodeError(self.head, self.frames, source, row, record)

    def details(self) -> dict[str, object]:
        """The fields as `datapipe build --json` prints them."""
        return {
            "source": self.source,
            "row": self.row,
            "record": self.record,
            "traceback": [
                {"file": f, "line": n, "function": fn, "code": t} for f, n, fn, t in self.frames
            ],
        }

    def __reduce__(self) -> tuple:
        return (
            type(self),
            (self.head, self.frames, self.source, self.row, self.record),
            self.__dict__,
        )


class IndexRequiredError(ConfigError, TypeError):
    """Random access or len() on a shard opened without its index.

    Also a TypeError, as len() of any unsized iterable is, so that ``list(reader)`` falls back
    to plain iteration instead of failing.
    """


def nearest(name: str, names: Iterable[object]) -> str | None:
    """The one of ``names`` that ``name`` most likely meant: the same but for case, else the
    closest spelling; None when none is close (a message then lists them all instead)."""
    folded = {str(n).casefold(): str(n) for n in names}
    key = name.casefold()
    if key in folded:
        return folded[key]
    close = difflib.get_close_matches(key, list(folded), n=1, cutoff=0.75)
    return folded[close[0]] if close else None


def did_you_mean(unknown: Sequence[str], names: Iterable[object]) -> str:
    """ "; did you mean 'Cylinders'?" for the misspelt ``unknown`` names that have a near one among
    ``names`` ("'A' for 'a', 'B' for 'b'" for several), "" when none has."""
    names = list(names)
    hints = [(u, n) for u in unknown if (n := nearest(u, names)) is not None and n != u]
    if not hints:
        return ""
    if len(unknown) == 1:
        return f"; did you mean {hints[0][1]!r}?"
    return "; did you mean " + ", ".join(f"{n!r} for {u!r}" for u, n in hints) + "?"
