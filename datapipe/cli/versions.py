"""`datapipe lease|du|log`: hold a version, see what a store really stores, and a dataset's
history."""

from __future__ import annotations

import time

import click

from datapipe.cli.datasets import dataset_of
from datapipe.cli.options import echo_json, json_option, storage_options
from datapipe.errors import ConfigError, NotFoundError
from datapipe.storage.byte_size import format_size
from datapipe.versioning.history import as_json as entry_json
from datapipe.versioning.history import history
from datapipe.versioning.layout import parse_dataset_url
from datapipe.versioning.leases import parse_duration as duration
from datapipe.versioning.leases import read_leases, release_lease, take_lease
from datapipe.versioning.manifest import short_id, shown_time
from datapipe.versioning.sizes import on_disk, usage
from datapipe.versioning.store import Store


@click.command()
@click.argument("dataset", required=False)
@click.option(
    "--for",
    "for_",
    metavar="DURATION",
    help="Take a lease for DURATION (7d, 12h, 2w) and print its id.",
)
@click.option(
    "--note", default="", help="Why the lease is held (shown by `datapipe lease DATASET`)."
)
@click.option(
    "--release",
    metavar="ID",
    help="End lease ID (DATASET: its STORE/NAME, or the STORE to search).",
)
@json_option
def lease(
    dataset: str | None, for_: str | None, note: str, release: str | None, as_json: bool
) -> None:
    """Hold DATASET (STORE/NAME[@REF]) against gc with --for, end a lease with --release ID, or list
    the leases of DATASET (STORE/NAME)."""
    if release is not None:
        if for_ is not None:
            raise ConfigError("--for and --release: give one of them")
        _release(dataset or "storage", release)
        return
    if dataset is None:
        raise ConfigError(
            "give DATASET (STORE/NAME): `datapipe lease STORE/NAME --for 7d` takes a lease, "
            "`datapipe lease STORE/NAME` lists them"
        )
    if for_ is not None:
        seconds = duration(for_, "--for")
        store_url, name, ref = parse_dataset_url(dataset)
        store = Store(store_url, storage_options())
        version = store.resolve(name, ref)
        record = take_lease(store, name, version, seconds, note)
        if as_json:
            echo_json(vars(record))
            return
        click.echo(record.id)
        click.echo(
            f"{name}@{short_id(version)} leased until {record.expires}; end it with "
            f"`datapipe lease {store_url}/{name} --release {record.id}`",
            err=True,
        )
        return
    store, name = dataset_of(dataset, "lease lists the leases of")
    records, damaged = read_leases(store, name)
    now = time.time()
    for d in damaged:
        click.echo(f"warning: {d}", err=True)
    if as_json:
        echo_json([{**vars(r), "state": r.state(now)} for r in records])
        return
    click.echo(f"{'ID':16} {'VERSION':12} {'KIND':7} {'STATE':7} {'EXPIRES':25} {'HOLDER':24} NOTE")
    for r in records:
        holder = f"{r.host}:{r.pid}" if r.pid is not None else "(by hand)"
        click.echo(
            f"{r.id:16} {short_id(r.version):12} {r.kind:7} {r.state(now):7} "
            f"{r.expires:25} {holder[:24]:24} {r.note}"
        )


def _release(where: str, lease_id: str) -> None:
    store_url, name, _ = parse_dataset_url(where)
    store = Store(store_url, storage_options())
    if name in store.datasets():
        candidates = [(store, name)]
    else:
        store = Store(where, storage_options())
        candidates = [(store, n) for n in store.datasets()]
    for store, name in candidates:
        record = release_lease(store, name, lease_id)
        if record is not None:
            click.echo(f"released {lease_id} ({name}@{short_id(record.version)})")
            return
    searched = ", ".join(f"{s.url}/{n}" for s, n in candidates) or f"{where} (no datasets)"
    raise NotFoundError(
        f"--release {lease_id}: no such lease in {searched}; list them with "
        "`datapipe lease STORE/NAME`"
    )


@click.command()
@click.argument("target", metavar="STORE[/NAME]", default="storage")
@json_option
def du(target: str, as_json: bool) -> None:
    """Bytes per dataset of STORE (or of one dataset), each file on disk counted once: OWN (shard
    files one version lists), SHARED (shard files several versions list, hard links included),
    OTHER (indexes, manifests, quarantines, build states) and ON DISK (the three added up); then
    the total of the store."""
    store_url, name, _ = parse_dataset_url(target)
    store = Store(store_url, storage_options())
    if "@" not in target and name in store.datasets():
        rows = {name: usage(store, name)}
        disk = rows[name]["disk_bytes"]
    else:
        whole = Store(target, storage_options())
        rows = {n: usage(whole, n) for n in whole.datasets()}
        if not rows:  # a missing folder, or a misspelt dataset, is said so
            if whole.absent() is None:
                raise NotFoundError(f"{target}: no datasets here; give STORE or STORE/NAME")
            raise store.absent() or (store.no_dataset(name) if store.datasets() else whole.absent())
        store = whole
        # the store's every file, once: what lies beside the datasets too
        disk = sum(on_disk(store, store.root).values())
    for n, r in rows.items():
        if r["missing_files"]:
            click.echo(
                f"warning: {n}: {r['missing_files']} shard files its manifests list are missing; "
                f"`datapipe verify {store.url}/{n}@VERSION` names them",
                err=True,
            )
    total = {k: sum(r[k] for r in rows.values()) for k in next(iter(rows.values()))}
    total.update(disk_bytes=disk, other_bytes=disk - total["stored_bytes"])
    if as_json:
        echo_json({"datasets": rows, "total": total})
        return
    click.echo(
        f"{'DATASET':16} {'VERSIONS':>8} {'OWN':>9} {'SHARED':>9} {'OTHER':>9} {'ON DISK':>9}"
    )
    for n, r in [*rows.items(), ("total", total)]:
        sizes = (r[k] for k in ("own_bytes", "shared_bytes", "other_bytes", "disk_bytes"))
        click.echo(f"{n:16} {r['versions']:>8} " + " ".join(f"{format_size(b):>9}" for b in sizes))


@click.command(name="log")
@click.argument("dataset")
@json_option
def log_command(dataset: str, as_json: bool) -> None:
    """The versions of DATASET (STORE/NAME), newest first along the parent links from latest, then
    those not on that chain: tags, leases, sizes, and against the parent the samples added, removed
    and changed (per split too; between token versions the tokens too) and the lineage inputs that
    changed."""
    store, name = dataset_of(dataset, "log shows")
    entries, problems = history(store, name)
    for problem in problems:
        click.echo(f"warning: {problem}", err=True)
    if as_json:
        echo_json([entry_json(e) for e in entries])
        return
    for e in entries:
        marks = ", ".join(
            e.tags
            + [f"leased {lid}" for lid in e.leases]
            + ([] if e.reachable else ["not on latest"])
        )
        click.echo(f"version {short_id(e.version)}" + (f" ({marks})" if marks else ""))
        parent = (
            "-"
            if e.parent is None
            else short_id(e.parent) + (" (pruned)" if e.parent_state == "pruned" else "")
        )
        click.echo(
            f"  created {shown_time(e.created_at)}, {e.samples} samples, {format_size(e.bytes)} "
            f"({format_size(e.own_bytes)} own, "
            f"{format_size(e.shared_bytes)} shared), parent {parent}"
        )
        if e.changes is not None:
            c = e.changes
            what = "documents" if "tokens_added" in c else "samples"
            click.echo(
                f"  {what}: {c['added']} added, {c['removed']} removed, {c['changed']} changed, "
                f"{c['unchanged']} unchanged"
            )
            if "tokens_added" in c:
                click.echo(f"  tokens: {c['tokens_added']} added, {c['tokens_removed']} removed")
            for split, c in e.splits.items():
                click.echo(
                    f"  split {split}: {c['added']} added, {c['removed']} removed, "
                    f"{c['changed']} changed"
                )
        for line in e.lineage:
            click.echo(f"  lineage: {line}")
