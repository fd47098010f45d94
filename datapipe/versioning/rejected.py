"""Quarantine files read back (with pyarrow alone) and their rows grouped by reason, counted."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from datapipe.errors import ConfigError, IntegrityError, NotFoundError
from datapipe.versioning.layout import VERSIONS
from datapipe.versioning.manifest import Manifest, short_id
from datapipe.versioning.store import Store

# STORE/NAME/rejected/TIME-ID.parquet: the quarantine of each build that failed, kept for the user
FAILED_QUARANTINE = "rejected"
# a quarantine's columns; files written before the line column lack it (read as null)
COLUMNS = ("stage", "reason", "source", "row", "line", "data")
AT = "_at"  # a row read without its data: its place in the file (``with_data``)

# the literals of a reason (quoted text, numbers): what varies from row to row under one reason
_LITERAL = re.compile(
    r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|(?<![\w.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.])"
)
# a reason's leading column ("column 'v': ..."): part of what the reason is, never a literal
_COLUMN = re.compile(r"^column '[^']*': ")
_HOLE = "\x00"  # a literal's place in a template


def read_rows(store: Store, path: str, data: bool = True) -> list[dict[str, Any]]:
    """The rows of the quarantine file at ``path`` of ``store``, each with every column of
    ``COLUMNS`` (``line`` None in a file written before it). Without ``data``, each row's data is
    left in the file (None, and the row's place under ``AT``): ``with_data`` reads it for the rows
    shown (a near_dedupe stage's quarantine holds the text of every document it removed)."""
    import pyarrow.parquet as pq

    def read() -> Any:
        with store.fs.open(path, "rb") as f:
            file = pq.ParquetFile(f)
            have = file.schema_arrow.names
            missing = [c for c in COLUMNS if c != "line" and c not in have]
            if missing:
                raise IntegrityError(
                    f"{path}: not a quarantine file: no column {', '.join(map(repr, missing))} "
                    f"(a quarantine has {', '.join(COLUMNS)})"
                )
            wanted = [c for c in COLUMNS if c in have and (data or c != "data")]
            # one thread: no pool left to stop when a short command exits
            return file.read(columns=wanted, use_threads=False)

    try:
        table = store.remote(path, read)
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such file") from None
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise IntegrityError(f"{path}: not a readable quarantine file ({e})") from None
    rows = [{c: row.get(c) for c in COLUMNS} for row in table.to_pylist()]
    if not data:
        for i, row in enumerate(rows):
            row[AT] = i
    return rows


def with_data(store: Store, path: str, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` read without their data (``read_rows``), with it, read from the file."""
    if not rows:
        return []
    at = [row[AT] for row in rows]
    data = store.remote(path, lambda: read_data(store.fs, path, at))
    return [
        {**{k: v for k, v in row.items() if k != AT}, "data": d}
        for row, d in zip(rows, data, strict=True)
    ]


def read_data(
    fs: Any,
    path: str,
    rows: Sequence[int] | np.ndarray | None = None,
    last: dict[tuple[str, int], Any] | None = None,
) -> list[str]:
    """The ``data`` column of the Parquet file ``path`` at ``rows`` (0-based, any order), or all
    of it; only the row groups that hold them are read. ``last`` keeps the last row group read,
    for the next call (rows read in file order, a call each, read each group once)."""
    import pyarrow.parquet as pq

    with fs.open(path, "rb") as f:
        file = pq.ParquetFile(f)
        if rows is None:
            return file.read(columns=["data"], use_threads=False)["data"].to_pylist()
        wanted = np.asarray(rows, dtype=np.int64)
        sizes = [file.metadata.row_group(g).num_rows for g in range(file.num_row_groups)]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        group = np.searchsorted(starts, wanted, side="right") - 1
        out: list[str] = [""] * len(wanted)
        for g in np.unique(group).tolist():
            column = last.get((path, g)) if last is not None else None
            if column is None:
                column = file.read_row_group(g, columns=["data"], use_threads=False)["data"]
                if last is not None:
                    last.clear()
                    last[(path, g)] = column
            where = np.flatnonzero(group == g)
            taken = column.take(wanted[where] - starts[g]).to_pylist()
            for i, value in zip(where.tolist(), taken, strict=True):
                out[i] = value
    return out


def version_quarantine(store: Store, name: str, manifest: Manifest) -> str | None:
    """The path of a version's quarantine (rejected.parquet), or None when it rejected no row."""
    if manifest.rejected is None:
        return None
    # a name beside the manifest, never a path elsewhere
    if "/" in manifest.rejected or manifest.rejected.startswith("."):
        raise IntegrityError(
            f"{store.url}/{name}@{short_id(manifest.version)}: the manifest's rejected is "
            f"{manifest.rejected!r}, not a file name in the version's directory"
        )
    return store.path(name, VERSIONS, manifest.version, manifest.rejected)


def failed_quarantines(store: Store, name: str) -> list[str]:
    """The names of the quarantines that failed builds of ``name`` left, newest first."""
    names = store.entry_names(store.path(name, FAILED_QUARANTINE))
    return sorted(
        (n for n in names if n.endswith(".parquet") and not n.startswith(".")), reverse=True
    )


def failed_quarantine(store: Store, name: str, which: str | None = None) -> str:
    """The path of the quarantine of failed build ``which`` of ``name`` (its file name, with or
    without .parquet), the newest when None; a NotFoundError that lists them."""
    kept = failed_quarantines(store, name)
    if not kept:
        raise NotFoundError(
            f"{store.url}/{name}: no failed build left its rejected rows here (they are kept "
            f"under {store.url}/{name}/{FAILED_QUARANTINE}/ when a build fails over "
            "max_rejected or with no samples left)"
        )
    if which is None:
        return store.path(name, FAILED_QUARANTINE, kept[0])
    wanted = which if which.endswith(".parquet") else f"{which}.parquet"
    if wanted not in kept:
        raise NotFoundError(
            f"{store.url}/{name}: no failed build {which!r} (kept, newest first: "
            f"{', '.join(n.removesuffix('.parquet') for n in kept[:10])})"
        )
    return store.path(name, FAILED_QUARANTINE, wanted)


@dataclass
class ReasonGroup:
    """The rows of one stage rejected for one reason: their count and the first as an example.

    ``reason`` is the reason with each literal (a quoted value, a number) that differs between the
    rows shown as '…'; ``example`` is the first row, in source order, with its own reason."""

    stage: str
    reason: str
    count: int
    example: dict[str, Any]
    _literals: list[str | None] = field(default_factory=list, repr=False)

    def as_json(self) -> dict[str, Any]:
        """What ``datapipe rejected --json`` prints of the group."""
        return {
            "stage": self.stage,
            "reason": self.reason,
            "count": self.count,
            "example": self.example,
        }


def _template(reason: str) -> tuple[str, list[str]]:
    """``reason`` with its literals taken out, and the literals."""
    head = _COLUMN.match(reason)
    start = head.end() if head else 0
    rest = reason[start:]
    return reason[:start] + _LITERAL.sub(_HOLE, rest), _LITERAL.findall(rest)


def group_reasons(rows: Iterable[dict[str, Any]]) -> list[ReasonGroup]:
    """``rows`` grouped by stage and reason (reasons that differ only in their literals are one),
    the largest group first, then in the order of their first row."""
    groups: dict[tuple[str, str], ReasonGroup] = {}
    for row in rows:
        template, literals = _template(str(row["reason"]))
        key = (str(row["stage"]), template)
        group = groups.get(key)
        if group is None:
            groups[key] = ReasonGroup(key[0], template, 1, row, list(literals))
            continue
        group.count += 1
        group._literals = [
            a if a == b else None for a, b in zip(group._literals, literals, strict=True)
        ]
    ordered = sorted(groups.values(), key=lambda g: -g.count)  # stable: first seen first
    for g in ordered:
        parts = g.reason.split(_HOLE)
        shown = [parts[0]]
        for literal, after in zip(g._literals, parts[1:], strict=True):
            shown += ["…" if literal is None else literal, after]
        g.reason = "".join(shown)
    return ordered


def stage_rows(rows: Sequence[dict[str, Any]], stage: str | None) -> list[dict[str, Any]]:
    """The rows of ``stage`` (all when None); a ConfigError naming the stages there are."""
    if stage is None:
        return list(rows)
    chosen = [r for r in rows if r["stage"] == stage]
    if not chosen:
        stages = sorted({str(r["stage"]) for r in rows})
        raise ConfigError(
            f"--stage {stage}: no row was rejected by that stage (stages with rejected rows: "
            f"{', '.join(stages) or 'none'})"
        )
    return chosen


def where(row: dict[str, Any]) -> str:
    """Where a rejected row came from: 'raw/a.csv line 46, row 30', or 'raw/a.parquet row 30'
    where the line is unknown (not a text source, or an older quarantine)."""
    if row.get("line") is None:
        return f"{row['source']} row {row['row']}"
    return f"{row['source']} line {row['line']}, row {row['row']}"


def reason_lines(groups: Sequence[ReasonGroup], top: int) -> list[str]:
    """The ``top`` groups, a line each (count, stage, reason, where the example came from), and a
    line for the rest: what the max_rejected error shows."""
    width = len(str(groups[0].count)) if groups else 1
    lines = [
        f"  {g.count:>{width}}  {g.stage}: {g.reason} (e.g. {where(g.example)})"
        for g in groups[:top]
    ]
    rest = groups[top:]
    if rest:
        rows = sum(g.count for g in rest)
        lines.append(f"  and {rows} more row{'s' * (rows != 1)} for {len(rest)} other reasons")
    return lines
