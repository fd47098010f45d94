"""Rows the stages dropped: a few examples per stage, the warning past half, the emptied build.

A stage that drops most of its rows is usually a mistake of the pipeline, not of the data (a
filter comparing a column of text with a bool, a dropna on a column that is never filled), so the
summary names it and shows some of the rows it dropped, placed in their source file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from datapipe.builder.config import LoadedPipeline, StageConfig
from datapipe.builder.quarantine import Placed, Reject, row_json

DROP_EXAMPLES = 3  # rows kept per stage and partition, and shown per warning
WARN_ABOVE = 0.5  # a stage that drops more than this share of its rows gets a warning
DROPPED = "dropped"
SHOWN_CHARS = 80  # of a text value in an example row


@dataclass(frozen=True)
class DroppedRow:
    """A row a stage dropped: its source file, 1-based row in that file, its values as JSON, and the
    1-based line it starts on (text sources; None where unknown)."""

    source: str
    row: int
    data: str
    line: int | None = None


@dataclass(frozen=True)
class DropWarning:
    """A stage that dropped more than WARN_ABOVE of the rows that reached it."""

    stage: str  # its label: stages[1].filter
    shown: str  # how the pipeline file states it: stages[1].filter "is_retweet == False"
    where: str  # FILE:LINE of the stage
    rows_in: int
    dropped: int
    examples: tuple[DroppedRow, ...]

    def message(self) -> str:
        """One line: the stage, the share it dropped, and its first example."""
        share = self.dropped / self.rows_in if self.rows_in else 0.0
        first = f"; e.g. {_placed(self.examples[0])}" if self.examples else ""
        return (
            f"{self.where}: {self.shown} dropped {self.dropped:,} of {self.rows_in:,} rows "
            f"({share:.0%}){first}"
        )

    def as_dict(self) -> dict[str, object]:
        """The warning as an item of the ``warnings`` list of ``build --json``."""
        return {
            "kind": "stage_dropped_most",
            "stage": self.stage,
            "where": self.where,
            "in": self.rows_in,
            "dropped": self.dropped,
            "message": self.message(),
            "examples": [vars(e) for e in self.examples],
        }


def dropped_examples(
    label: str, before: pd.DataFrame, after: pd.DataFrame, rejected: Sequence[Reject]
) -> list[Reject]:
    """Up to DROP_EXAMPLES rows of ``before`` that a stage neither kept in ``after`` nor rejected,
    first rows first."""
    gone = before.index.difference(after.index)
    if len(gone) and rejected:
        gone = gone.difference(pd.Index([r.row for r in rejected]))
    return [
        Reject(label, DROPPED, int(row), _shortened(row_json(before, row)))
        for row in gone[:DROP_EXAMPLES]
    ]


def _shortened(data: str) -> str:
    """A row's JSON with each long text cut to SHOWN_CHARS (an image's base64, a long post): an
    example is for reading in a summary line."""
    values = json.loads(data)
    return json.dumps(
        {
            k: v[: SHOWN_CHARS - 3] + "..." if isinstance(v, str) and len(v) > SHOWN_CHARS else v
            for k, v in values.items()
        },
        ensure_ascii=False,
    )


def stage_shown(stage: StageConfig, label: str) -> str:
    """The stage as its pipeline file states it: ``stages[1].filter "is_retweet == False"``."""
    args = stage.args
    if stage.kind in ("filter", "map"):
        return f'{label} "{args}"' if stage.kind == "filter" else f"{label} {args}"
    columns = getattr(args, "columns", None)
    return f"{label} [{', '.join(columns)}]" if columns else label


def _placed(example: DroppedRow) -> str:
    line = f"line {example.line}, " if example.line is not None else ""
    return f"{example.source} {line}row {example.row}: {example.data}"


def drop_warnings(
    loaded: LoadedPipeline,
    counts: Sequence[tuple[str, int, int]],
    examples: Sequence[Placed],
) -> list[DropWarning]:
    """A warning per stage that dropped more than WARN_ABOVE of its rows, from (label, rows in,
    dropped) per stage and the placed examples (``accounting.placed``)."""
    stages = {f"stages[{i}].{s.kind}": s for i, s in enumerate(loaded.pipeline.stages)}
    warnings = []
    for label, rows_in, dropped in counts:
        if label not in stages or not rows_in or dropped <= WARN_ABOVE * rows_in:
            continue
        shown = tuple(
            DroppedRow(source, row, r.data, line)
            for r, source, row, line in examples
            if r.stage == label
        )[:DROP_EXAMPLES]
        warnings.append(
            DropWarning(
                label,
                stage_shown(stages[label], label),
                loaded.where(label),
                rows_in,
                dropped,
                shown,
            )
        )
    return warnings


def emptied_message(warnings: Sequence[DropWarning], pipeline_file: str) -> str | None:
    """Why no sample is left, when a stage dropped every row that reached it: the stage, an example
    row and what to check; None when no stage did (rows were rejected instead)."""
    emptied = next((w for w in warnings if w.dropped == w.rows_in), None)
    if emptied is None:
        return None
    rows = "\n".join(f"  {_placed(e)}" for e in emptied.examples)
    return (
        f"{emptied.where}: {emptied.shown} dropped all {emptied.rows_in:,} rows that reached it; "
        "no samples left"
        + (f". Some of the rows it dropped:\n{rows}\n" if rows else ". ")
        + _HINTS.get(emptied.stage.rsplit(".", 1)[-1], _HINTS["filter"]).format(pipeline_file)
    )


_HINTS = {
    "filter": "Check the type of each column it reads with `datapipe schema {}`: a value of one "
    "type never equals one of another (the text 'False' is not the bool False); set "
    "source.options.dtype or add a cast stage",
    "dropna": "Each row misses a value in a column it checks: see which columns the source has "
    "with `datapipe schema {}`, and fill them with a fillna stage or check fewer",
    "map": "The map function returned no rows: run it on a few rows of the source, and see the "
    "columns it gets with `datapipe schema {}`",
}
