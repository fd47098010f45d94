"""`datapipe inspect` and `datapipe index`: look into shard files and build their indexes."""

from __future__ import annotations

from typing import Any

import click

from datapipe.formats.base import KEY
from datapipe.formats.registry import FORMATS
from datapipe.formats.shards import build_index, open_shard

_FORMAT = click.option(
    "--format",
    "fmt",
    type=click.Choice(list(FORMATS)),
    default=None,
    help="Shard format (default: by extension).",
)


def _describe(value: Any) -> str:
    """A short description of a field value: its size and, for small text, a preview."""
    if isinstance(value, bytes | memoryview):
        data = bytes(value[:32])
        preview = ""
        if data.isascii() and data.decode().isprintable():
            preview = f" {data.decode()!r}{'…' if len(value) > 32 else ''}"
        return f"{len(value)} B{preview}"
    if hasattr(value, "dtype"):
        return f"{value.dtype}[{len(value)}] {value.tolist()[:8]}"
    return f"{type(value).__name__} {value!r:.60}"


@click.command()
@click.argument("shard", type=click.Path(dir_okay=False))
@click.option(
    "-n",
    "--n",
    "count",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Samples to show.",
)
@_FORMAT
def inspect(shard: str, count: int, fmt: str | None) -> None:
    """Print keys, fields and sizes of the first samples of SHARD."""
    with open_shard(shard, fmt) as reader:
        if reader.index is not None:
            click.echo(
                f"{shard}: {len(reader)} samples, fields: {', '.join(reader.index.fields) or '-'}"
            )
        else:
            click.echo(
                f"{shard}: no index (run `datapipe index {shard}` for counts and random access)"
            )
        for i, sample in enumerate(reader):
            if i >= count:
                break
            click.echo(f"[{i}] {sample[KEY]}")
            for name, value in sample.items():
                if name != KEY:
                    click.echo(f"    {name}: {_describe(value)}")


@click.command()
@click.argument("shards", nargs=-1, required=True, type=click.Path(dir_okay=False))
@_FORMAT
def index(shards: tuple[str, ...], fmt: str | None) -> None:
    """Scan each SHARD (ours or foreign) and write its index next to it as SHARD.idx."""
    for shard in shards:
        path, built = build_index(shard, fmt)
        click.echo(f"{path}: {len(built)} samples")
