"""`datapipe batches|audit`: a training run's schedule, step by step or checked whole, without
reading payloads."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import click

from datapipe.cli.options import storage_options
from datapipe.errors import ConfigError

_RUN = [
    click.argument("data", metavar="DATASET|MIXFILE"),
    click.option(
        "--batch-size",
        "-b",
        type=click.IntRange(min=1),
        required=True,
        help="Samples per rank and step.",
    ),
    click.option(
        "--world-size",
        "-w",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="Ranks of the run.",
    ),
    click.option("--seed", type=int, default=0, show_default=True, help="The loader's seed."),
    click.option(
        "--drop-last",
        type=click.Choice(["drop", "pad"]),
        default="drop",
        show_default=True,
        help="drop: the last partial global batch of an epoch is dropped; pad: it "
        "is filled from the start.",
    ),
    click.option(
        "--no-shuffle", is_flag=True, help="The loader reads in storage order (shuffle=False)."
    ),
    click.option(
        "--block-shards",
        type=click.IntRange(min=1),
        default=4,
        show_default=True,
        help="The loader's block_shards.",
    ),
    click.option(
        "--pack",
        "pack_spec",
        metavar="length=N[,mode=M][,documents=D][,long=L]",
        help="The loader's pack= (a token version read as rows): datapipe.pack's settings.",
    ),
    click.option("--json", "as_json", is_flag=True, help="Print JSON."),
]


def _run_options(command: Any) -> Any:
    for option in reversed(_RUN):
        command = option(command)
    return command


def _settings(
    batch_size: int, seed: int, drop_last: str, no_shuffle: bool, block_shards: int
) -> Any:
    from datapipe.loader.settings import LoaderSettings

    return LoaderSettings(
        batch_size=batch_size,
        shuffle=not no_shuffle,
        seed=seed,
        drop_last=True if drop_last == "drop" else "pad",
        block_shards=block_shards,
    )


def _open(data: str, pack_spec: str | None, settings: Any) -> Any:
    """What the run reads: the dataset or mix, as packed rows with ``--pack``."""
    from datapipe.loader.opening import open_data
    from datapipe.loader.tokens.pack import Pack
    from datapipe.loader.tokens.packed_set import packed

    pack = Pack.parse(pack_spec) if pack_spec is not None else None
    return packed(
        open_data(data, storage_options()),
        pack,
        settings.seed,
        settings.shuffle,
        settings.block_shards,
    )


def _steps(step: int | None, steps: str | None) -> range:
    if (step is None) == (steps is None):
        raise ConfigError("give --step N or --steps A:B (B excluded)")
    if step is not None:
        return range(step, step + 1)
    try:
        a, b = (int(v) for v in steps.split(":"))  # type: ignore[union-attr]
        if not 0 <= a < b:
            raise ValueError
    except ValueError:
        raise ConfigError(f"--steps {steps!r}: give A:B with 0 <= A < B (B excluded)") from None
    return range(a, b)


@click.command()
@_run_options
@click.option("--step", type=click.IntRange(min=0), help="One global step.")
@click.option("--steps", help="Global steps A:B (B excluded).")
@click.option("--rank", type=click.IntRange(min=0), help="Only this rank's samples.")
def batches(
    data: str,
    batch_size: int,
    world_size: int,
    seed: int,
    drop_last: str,
    no_shuffle: bool,
    block_shards: int,
    pack_spec: str | None,
    as_json: bool,
    step: int | None,
    steps: str | None,
    rank: int | None,
) -> None:
    """Print the samples global steps deliver, per step and rank: key, source, shard and offset.

    The run is described by the options, as the Loader was given them; nothing but the shard indexes
    is read.
    """
    from datapipe.loader.ledger import entries, row_entries
    from datapipe.loader.timeline import Timeline

    settings = _settings(batch_size, seed, drop_last, no_shuffle, block_shards)
    if rank is not None and rank >= world_size:
        raise ConfigError(f"--rank {rank} is not within a world of {world_size}")
    shard_set = _open(data, pack_spec, settings)
    timeline = Timeline(len(shard_set), batch_size, world_size, settings.drop_last)
    ranks = range(world_size) if rank is None else range(rank, rank + 1)
    if pack_spec is not None:
        rows = row_entries(shard_set, settings, timeline, _steps(step, steps), ranks)
        _print_steps(
            rows,
            as_json,
            lambda e: "row: " + ", ".join(f"{s}:{k}[{a}:{b}]" for s, k, a, b in e.pieces),
        )
        return
    found = entries(shard_set, settings, timeline, _steps(step, steps), ranks)
    _print_steps(found, as_json, lambda e: f"{e.source:12} {e.key:24} {e.shard}@{e.offset}")


def _print_steps(found: list[Any], as_json: bool, line: Callable[[Any], str]) -> None:
    """Entries (samples or packed rows) step by step and rank by rank, a ``line`` each."""
    if as_json:
        click.echo(json.dumps([asdict(e) for e in found], indent=1, ensure_ascii=False))
        return
    current = None
    for e in found:
        if (e.step, e.rank) != current:
            current = (e.step, e.rank)
            click.echo(f"step {e.step} rank {e.rank}")
        click.echo(f"  {line(e)}")


@click.command(name="audit")
@_run_options
@click.option(
    "--epochs", type=click.IntRange(min=1), default=1, show_default=True, help="Epochs to replay."
)
@click.option(
    "--resume",
    "resumes",
    multiple=True,
    metavar="STEP:WORLD_SIZE[:BATCH_SIZE]",
    help="Stop before STEP and continue from the state with that world size (repeatable).",
)
@click.pass_context
def audit_command(
    ctx: click.Context,
    data: str,
    batch_size: int,
    world_size: int,
    seed: int,
    drop_last: str,
    no_shuffle: bool,
    block_shards: int,
    pack_spec: str | None,
    as_json: bool,
    epochs: int,
    resumes: tuple[str, ...],
) -> None:
    """Replay a run's schedule without reading payloads and check it; exit 1 naming the first
    violation.

    Per epoch: samples delivered, keys delivered more than once, keys never delivered (and why),
    batches per rank and, for a mix, each source's share.
    """
    from datapipe.loader.audit import Resume, audit

    settings = _settings(batch_size, seed, drop_last, no_shuffle, block_shards)
    report = audit(
        _open(data, pack_spec, settings),
        batch_size,
        world_size,
        seed,
        epochs,
        settings.drop_last,
        [Resume.parse(r) for r in resumes],
        shuffle=settings.shuffle,
        block_shards=block_shards,
    )
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=1, ensure_ascii=False))
    else:
        click.echo(
            f"{'EPOCH':>5} {'DELIVERED':>10} {'REPEATED':>9} {'PADDED':>7} "
            f"{'NEVER':>7}  BATCHES/RANK  SHARES"
        )
        for e in report.epochs:
            per_rank = ",".join(f"{n}@w{w}" for w, n in e.batches_per_rank)
            shares = " ".join(f"{k}={v:.4f}" for k, v in (e.shares or {}).items())
            click.echo(
                f"{e.epoch:>5} {e.samples:>10} {e.repeated:>9} {e.padded:>7} "
                f"{e.never:>7}  {per_rank:12}  {shares}"
            )
            if e.never_reason:
                click.echo(f"      never delivered: {e.never_reason}")
            if e.tokens is not None:
                _print_tokens(e.tokens)
        for v in report.violations:
            click.echo(f"violation: {v}", err=True)
        if report.ok:
            click.echo("ok: every property holds")
    if not report.ok:
        ctx.exit(1)


def _print_tokens(tokens: dict[str, Any]) -> None:
    """An epoch's packed rows in tokens (the audit with --pack)."""
    docs = tokens["documents"]
    click.echo(
        f"      tokens {tokens['tokens']:,} in {tokens['rows']:,} rows, padding "
        f"{tokens['padding']:.2%}; documents whole {docs['whole']:,}, split {docs['split']:,}, "
        f"cut {docs['cut']:,}, never {docs['never']:,}"
    )
    if tokens["token_shares"]:
        shares = " ".join(f"{k}={v:.4f}" for k, v in tokens["token_shares"].items())
        click.echo(f"      token shares: {shares}")
