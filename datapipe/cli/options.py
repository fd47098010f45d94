"""Options shared by the commands: fsspec storage options (-o KEY=VALUE on the root command),
--json, --scheduler-timeout."""

from __future__ import annotations

import json
from typing import Any

import click


def parse_storage_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    """KEY=VALUE pairs as a dict; a VALUE that is valid JSON is decoded (true, 3, {...})."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(
                f"{pair!r}: expected KEY=VALUE", param_hint="-o/--storage-option"
            )
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def storage_options() -> dict[str, Any]:
    """The -o options of the running command (empty outside the CLI)."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    return dict((obj or {}).get("storage_options", {}))


# shared by the commands that build (build, check): how long to keep trying to reach --scheduler
scheduler_timeout_option = click.option(
    "--scheduler-timeout",
    type=float,
    envvar="DATAPIPE_SCHEDULER_TIMEOUT",
    metavar="SECONDS",
    help="How long to keep trying to reach --scheduler [default: 10; env "
    "DATAPIPE_SCHEDULER_TIMEOUT].",
)


# shared by the commands that print a table: print JSON instead (written by echo_json)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


def echo_json(data: Any) -> None:
    """Print ``data`` as --json prints it: indented, keys sorted, UTF-8 as is."""
    click.echo(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False))
