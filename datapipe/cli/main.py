"""Entry point of the `datapipe` command; turns DatapipeError into a message and an exit code."""

from __future__ import annotations

import logging
from typing import Any

import click

from datapipe import __version__
from datapipe.cli.options import parse_storage_options
from datapipe.errors import DatapipeError


class DatapipeGroup(click.Group):
    """A click group that reports DatapipeError as 'error: ...' on stderr, never as a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, mapping DatapipeError to its exit code."""
        try:
            return super().invoke(ctx)
        except DatapipeError as e:
            click.echo(f"error: {e}", err=True)
            ctx.exit(e.exit_code)


@click.group(cls=DatapipeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="datapipe")
@click.option("-v", "--verbose", is_flag=True, help="Log progress and skipped members.")
@click.option(
    "-o",
    "--storage-option",
    "storage_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="fsspec storage option for s3:// and other stores (repeatable; values "
    "are JSON when they parse, "
    "e.g. -o anon=true -o endpoint_url=http://127.0.0.1:9000). Credentials come from the "
    "usual environment; they are never printed or stored.",
)
@click.pass_context
def cli(ctx: click.Context, verbose: bool, storage_options: tuple[str, ...]) -> None:
    """Build, version and stream sharded datasets for model training."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s: %(message)s"
    )
    ctx.obj = {"storage_options": parse_storage_options(storage_options)}


def _register() -> None:
    from datapipe.cli import (
        build,
        datasets,
        rejected,
        reproduce,
        schema,
        serve,
        shards,
        training,
        versions,
    )

    for command in (
        build.build,
        schema.schema,
        reproduce.dvc_stage,
        reproduce.check,
        shards.inspect,
        shards.index,
        datasets.ls,
        datasets.info,
        datasets.verify,
        datasets.tag,
        datasets.diff,
        rejected.rejected,
        datasets.gc,
        versions.lease,
        versions.du,
        versions.log_command,
        training.batches,
        training.audit_command,
        serve.serve,
    ):
        cli.add_command(command)


_register()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="datapipe")
