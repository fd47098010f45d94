"""`datapipe rejected`: the rows a build rejected, grouped by reason, with where each came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from datapipe.cli.options import echo_json, json_option, storage_options
from datapipe.errors import ConfigError, NotFoundError
from datapipe.storage.fs import url_of
from datapipe.versioning.layout import parse_dataset_url
from datapipe.versioning.manifest import short_id
from datapipe.versioning.rejected import (
    failed_quarantine,
    failed_quarantines,
    group_reasons,
    read_rows,
    stage_rows,
    version_quarantine,
    where,
    with_data,
)
from datapipe.versioning.store import Store, open_dataset_url

TOP = 10  # reasons shown without --top
DATA = 200  # characters of an example row shown (--json gives it whole)


@dataclass(frozen=True)
class Quarantine:
    """One quarantine: what it is of (in words and for --json), the file and its rows (their data
    left in the file until ``shown``)."""

    title: str
    about: dict[str, Any]
    url: str | None  # of the file (s3://bucket/key on S3); None for a version that rejected none
    rows: list[dict[str, Any]]
    store: Store | None = None
    path: str | None = None

    def shown(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` with their data, read from the file."""
        if self.store is None or self.path is None or not rows:
            return rows
        return with_data(self.store, self.path, rows)


def _read(store: Store, path: str) -> dict[str, Any]:
    """The rows of quarantine ``path`` without their data, and where to read it."""
    return {"rows": read_rows(store, path, data=False), "store": store, "path": path}


def _of_version(dataset: str) -> Quarantine:
    try:
        store, name, m = open_dataset_url(dataset, storage_options())
    except NotFoundError as e:
        store_url, name, _ = parse_dataset_url(dataset)
        if not failed_quarantines(Store(store_url, storage_options()), name):
            raise
        raise NotFoundError(
            f"{e}; builds of {name} that failed left their rejected rows: `datapipe rejected "
            f"{store_url}/{name} --failed`"
        ) from None
    path = version_quarantine(store, name, m)
    url = url_of(store.fs, path) if path is not None else None
    read = m.stages[0].rows_in if m.stages else 0
    return Quarantine(
        f"{name}@{short_id(m.version)} ({read} rows read)",
        {"dataset": name, "version": m.version, "failed_build": None, "rows_read": read},
        url,
        **(_read(store, path) if path is not None else {"rows": []}),
    )


def _of_failed(dataset: str) -> Quarantine:
    if "@" in dataset.rstrip("/").rsplit("/", 1)[-1]:
        raise ConfigError(
            f"{dataset}: --failed reads the newest failed build of STORE/NAME, which has no "
            "version: leave out the @REF (or give the file the build's error named)"
        )
    store_url, name, _ = parse_dataset_url(dataset)
    store = Store(store_url, storage_options())
    path = failed_quarantine(store, name)
    build = path.rsplit("/", 1)[-1].removesuffix(".parquet")
    kept = len(failed_quarantines(store, name))
    older = f"; {kept - 1} older kept in {store_url}/{name}/rejected/" if kept > 1 else ""
    return Quarantine(
        f"{name}, failed build {build}{older}",
        {"dataset": name, "version": None, "failed_build": build, "rows_read": None},
        url_of(store.fs, path),
        **_read(store, path),
    )


def _of_file(url: str) -> Quarantine:
    head, _, file = url.rpartition("/")
    store = Store(head or ".", storage_options())
    path = store.path(file)
    return Quarantine(
        url,
        {"dataset": None, "version": None, "failed_build": None, "rows_read": None},
        url_of(store.fs, path),
        **_read(store, path),
    )


def _one_line(text: Any) -> str:
    shown = str(text).replace("\r", "\\r").replace("\n", "\\n")
    return shown if len(shown) <= DATA else shown[: DATA - 1] + "…"


@click.command()
@click.argument("dataset")
@click.option(
    "--failed",
    is_flag=True,
    help="Read the rows of the newest failed build of DATASET (STORE/NAME), kept when a build "
    "stops over max_rejected or with no samples left.",
)
@click.option(
    "--stage",
    metavar="STAGE",
    help="Only the rows STAGE rejected (e.g. source, stages[2].validate, sample).",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=TOP,
    show_default=True,
    metavar="N",
    help="Show the N most frequent reasons.",
)
@json_option
def rejected(dataset: str, failed: bool, stage: str | None, top: int, as_json: bool) -> None:
    """Show the rows a build rejected (a version's, or with --failed a failed build's), grouped by
    reason with their counts, most frequent first; each with an example row, its source file, line
    and row.

    DATASET is STORE/NAME[@REF] (a version; with --failed, STORE/NAME) or the path of a quarantine
    file (.parquet), such as the one a failed build's error names. Reasons that differ only in a
    value are one reason, the value shown as '…'."""
    if dataset.endswith(".parquet"):
        if failed:
            raise ConfigError(f"{dataset}: a quarantine file is read as it is; leave out --failed")
        q = _of_file(dataset)
    else:
        q = _of_failed(dataset) if failed else _of_version(dataset)
    rows = stage_rows(q.rows, stage)
    groups = group_reasons(rows)
    for g, example in zip(groups, q.shown([g.example for g in groups[:top]]), strict=False):
        g.example = example
    if as_json:
        echo_json(
            {
                **q.about,
                "file": q.url,
                "rows": len(rows),
                "reasons_total": len(groups),
                "reasons": [g.as_json() for g in groups[:top]],
            }
        )
        return
    if not rows:
        click.echo(f"{q.title}: no rows were rejected")
        return
    of = f" of stage {stage}" if stage else ""
    rows_word, reasons_word = _plural(len(rows), "rejected row"), _plural(len(groups), "reason")
    click.echo(f"{q.title}: {rows_word}{of}, {reasons_word}")
    width = len(str(groups[0].count))
    for g in groups[:top]:
        click.echo(f"{g.count:>{width}}  {g.stage}: {g.reason}")
        pad = " " * (width + 2)
        own = "" if g.example["reason"] == g.reason else f": {g.example['reason']}"
        click.echo(f"{pad}e.g. {where(g.example)}{_one_line(own)}")
        click.echo(f"{pad}{_one_line(g.example['data'])}")
    if len(groups) > top:
        rest = sum(g.count for g in groups[top:])
        more = _plural(len(groups) - top, "more reason")
        click.echo(f"... and {more} ({_plural(rest, 'row')}): --top {len(groups)}")


def _plural(n: int, noun: str) -> str:
    """``n`` and ``noun``, with an s unless n is 1."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
