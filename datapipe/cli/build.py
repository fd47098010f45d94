"""`datapipe build`: run a pipeline file and print the version it made."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from datapipe.cli.options import scheduler_timeout_option, storage_options
from datapipe.errors import ConfigError, DatapipeError
from datapipe.storage.byte_size import format_size
from datapipe.versioning.manifest import short_id
from datapipe.versioning.store import Store

if TYPE_CHECKING:
    from datapipe.builder.result import IncrementalReport


def _progress(rich_bars: bool) -> Any:
    """A BuildProgress that draws rich bars on a terminal, or logs one line per pass otherwise."""
    from datapipe.builder.progress import BuildProgress

    class LineProgress(BuildProgress):
        def dashboard(self, link: str | None) -> None:
            if link:
                click.echo(f"dask dashboard: {link}", err=True)

        def phase(self, name: str, total: int) -> None:
            click.echo(f"{name}: {total} tasks", err=True)

        def message(self, text: str) -> None:
            click.echo(text, err=True)

    if not rich_bars:
        return LineProgress()

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    class BarProgress(LineProgress):
        def __init__(self) -> None:
            # on stderr, with the log lines: stdout carries the summary (and --json), which scripts
            # read
            self.bars = Progress(
                TextColumn("{task.description:<24}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                transient=False,
                console=Console(stderr=True),
            )
            self.tasks: dict[str, Any] = {}

        def phase(self, name: str, total: int) -> None:
            self.bars.start()
            self.tasks[name] = self.bars.add_task(name, total=total)

        def advance(self, name: str, done: int = 1) -> None:
            self.bars.advance(self.tasks[name], done)

    return BarProgress()


def _print_summary(summary: dict[str, Any], incremental: IncrementalReport | None) -> None:
    click.echo(f"{'stage':<24} {'in':>10} {'out':>10} {'dropped':>10} {'rejected':>10}")
    for s in summary["stages"]:
        click.echo(
            f"{s['stage']:<24} {s['in']:>10} {s['out']:>10} {s['dropped']:>10} {s['rejected']:>10}"
        )
    for warning in summary.get("warnings", ()):
        click.echo(f"warning: {warning['message']}")
        for e in warning["examples"][1:]:
            line = f"line {e['line']}, " if e.get("line") is not None else ""
            click.echo(f"  e.g. {e['source']} {line}row {e['row']}: {e['data']}")
    cost = summary.get("overhead")
    of_fields = f" ({cost['ratio']:.1f}x the fields' {format_size(cost['fields'])})" if cost else ""
    click.echo(
        f"{summary['samples']} samples in {summary['shards']} shards, {summary['bytes']} bytes"
        f"{of_fields}; {summary['rejected']} rows quarantined"
    )

    seconds = dict(summary.get("seconds", {}))
    if "total" in seconds:
        total = seconds.pop("total")
        peak = summary.get("worker_peak_rss")
        memory = f"; peak worker memory {peak / 1e6:.0f} MB" if peak else ""
        click.echo(
            f"{total:.1f} s ({summary.get('ran_on', 'cluster')}): "
            + ", ".join(f"{phase} {s:.1f} s" for phase, s in seconds.items())
            + memory
        )
    if incremental is not None:
        click.echo(_incremental_line(incremental))
    for note in summary.get("notes", ()):
        click.echo(note)
    click.echo(f"version {summary['version']}")
    click.echo(summary["url"])


def _incremental_line(report: IncrementalReport) -> str:
    """What the build took from its parent version, or why it built everything."""
    parts, shards, files = report.partitions, report.shards, report.source_files
    if report.full_because:
        # shards of the same bytes as stored ones are kept once in a full build too
        same = f"; shards {shards.written} written, {shards.reused} reused" if shards.reused else ""
        return f"full build: {report.full_because}{same}"
    return (
        f"incremental from {short_id(report.parent)}: partitions "
        f"{parts.measured} measured, "
        f"{parts.reused} reused; shards {shards.written} written "
        f"({format_size(shards.bytes_written)}), "
        f"{shards.reused} reused; source files "
        f"{files.hashed} hashed, {files.trusted} unchanged"
    )


def _error_json(e: DatapipeError) -> dict[str, Any]:
    """A failed build as `build --json` prints it: the message and exit code, and what the error
    knows of its place (a map's record and the user's frames)."""
    details = getattr(e, "details", None)
    return {
        "message": str(e),
        "exit_code": e.exit_code,
        "kind": type(e).__name__,
        **(details() if callable(details) else {}),
    }


@click.command()
@click.argument("pipeline", type=click.Path(dir_okay=False))
@click.option(
    "--out",
    "store_url",
    default="storage",
    show_default=True,
    help="Store URL (a path or any fsspec URL).",
)
@click.option(
    "--workers",
    type=int,
    envvar="DATAPIPE_WORKERS",
    help="Dask worker processes of the embedded cluster [default: CPU count; "
    "env DATAPIPE_WORKERS]. "
    "Without it, --scheduler or --memory-limit, a source under 64 MiB is built in this process.",
)
@click.option(
    "--scheduler", help="Run on an existing Dask cluster: tcp://HOST:PORT of its scheduler."
)
@scheduler_timeout_option
@click.option(
    "--memory-limit",
    metavar="SIZE",
    help="Memory per worker of the embedded cluster, e.g. 2GB or 1.5GiB (Dask "
    "spills to disk at 60%, "
    "pauses the worker at 80% and restarts it at 95%) [default: the machine's memory shared among "
    "the workers].",
)
@click.option(
    "--tag", "tags", multiple=True, help="Also point this tag at the new version (repeatable)."
)
@click.option(
    "--rehash",
    is_flag=True,
    help="Read every source file for its hash, even one whose stamp the last "
    "build recorded (for sources "
    "on network or FUSE file systems, whose ctime may lag a change).",
)
@click.option(
    "--dashboard/--no-dashboard",
    default=True,
    envvar="DATAPIPE_DASHBOARD",
    help="Serve the embedded cluster's Dask dashboard, and print the link to "
    "the dashboard of the cluster "
    "the build runs on [default: on; env DATAPIPE_DASHBOARD=0 turns it off]. Off, an embedded "
    "cluster starts sooner.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print a JSON summary as the last line; a failed build prints {"error": ...}: the '
    "message, the exit code and, for a map function that raised, the record and your frames.",
)
def build(
    pipeline: str,
    store_url: str,
    workers: int | None,
    scheduler: str | None,
    scheduler_timeout: float | None,
    memory_limit: str | None,
    tags: tuple[str, ...],
    rehash: bool,
    dashboard: bool,
    as_json: bool,
) -> None:
    """Build PIPELINE (a YAML file) into a new version of its dataset."""
    from datapipe.builder.config import load_pipeline
    from datapipe.builder.run import Execution
    from datapipe.builder.run import build as run_build
    from datapipe.storage.byte_size import parse_size

    limit = None
    if memory_limit is not None:
        try:
            limit = parse_size(memory_limit)
        except ValueError as e:
            raise ConfigError(f"--memory-limit {memory_limit}: {e}") from None
    loaded = load_pipeline(pipeline)
    progress = _progress(sys.stderr.isatty() and not as_json)
    try:
        execution = Execution(
            workers=workers,
            scheduler=scheduler,
            scheduler_timeout=scheduler_timeout,
            memory_limit=limit,
            dashboard=dashboard,
            rehash=rehash,
        )
        result = run_build(
            loaded,
            Store(store_url, storage_options()),
            tags=tags,
            progress=progress,
            execution=execution,
        )
    except DatapipeError as e:
        error = loaded.located(e)
        if as_json:  # a script reads why, where and (a map's) whose code as it reads a summary
            click.echo(json.dumps({"error": _error_json(error)}, sort_keys=True))
        raise error from None
    finally:
        bars = getattr(progress, "bars", None)
        if bars is not None:
            bars.stop()
    summary = result.summary()
    if as_json:
        click.echo(json.dumps(summary, sort_keys=True))
    else:
        _print_summary(summary, result.incremental)
    advice = (summary.get("overhead") or {}).get("advice")
    if advice:
        click.echo(f"warning: {advice}", err=True)
