"""`datapipe ls|info|verify|tag|diff|gc`: look at and look after the versions in a store."""

from __future__ import annotations

import sys
from typing import Any

import click

from datapipe.cli.options import echo_json, json_option, storage_options
from datapipe.errors import ConfigError
from datapipe.storage.byte_size import format_size
from datapipe.versioning.gc import collect
from datapipe.versioning.layout import check_ref_name, parse_dataset_url
from datapipe.versioning.leases import parse_duration
from datapipe.versioning.manifest import Manifest, short_id, shown_time
from datapipe.versioning.sample_diff import Side, VersionDiff, VersionPair
from datapipe.versioning.sizes import Sharing
from datapipe.versioning.store import Store, open_dataset_url
from datapipe.versioning.token_stats import token_summary
from datapipe.versioning.verify import verify_version


@click.command(name="ls")
@click.argument("store_url", metavar="STORE", default="storage")
@json_option
def ls(store_url: str, as_json: bool) -> None:
    """List datasets, versions, tags, samples, size (own: in files no other version lists; shared:
    in files stored once for several versions, hard links included), creation time and parent in
    STORE."""
    store = Store(store_url, storage_options())
    absent = store.absent()
    if absent is not None:
        raise absent
    rows = []
    for name in store.datasets():
        tags: dict[str, list[str]] = {}
        for ref, version in store.refs(name).items():
            tags.setdefault(version, []).append(ref)
        manifests = {v: store.manifest(name, v) for v in store.versions(name)}
        sharing = Sharing(store, name, manifests)
        for version, m in manifests.items():
            sizes = sharing.version(version)
            rows.append(
                {
                    "dataset": name,
                    "version": version,
                    "tags": sorted(tags.get(version, [])),
                    "samples": m.samples,
                    "bytes": m.bytes,
                    "own_bytes": sizes.own_bytes,
                    "shared_bytes": sizes.shared_bytes,
                    "created_at": m.created_at,
                    "parent": m.parent,
                }
            )
    if as_json:
        echo_json(rows)
        return
    rows.sort(key=lambda r: (r["dataset"], r["created_at"]))
    click.echo(
        f"{'DATASET':16} {'VERSION':12} {'TAGS':16} {'SAMPLES':>10} {'SIZE':>9} "
        f"{'OWN':>9} {'SHARED':>9}  "
        f"{'CREATED':25} PARENT"
    )
    for r in rows:
        click.echo(
            f"{r['dataset']:16} {short_id(r['version']):12} "
            f"{','.join(r['tags']) or '-':16} {r['samples']:>10} "
            f"{format_size(r['bytes']):>9} {format_size(r['own_bytes']):>9} "
            f"{format_size(r['shared_bytes']):>9}  "
            f"{shown_time(r['created_at']):25} {short_id(r['parent']) if r['parent'] else '-'}"
        )


def _summary(m: Manifest) -> dict[str, Any]:
    sizes = sorted(s.bytes for s in m.shards)
    return {
        "version": m.version,
        "name": m.name,
        "parent": m.parent,
        "created_at": m.created_at,
        "host": m.host,
        "shard_format": m.shard_format,
        "fields": m.fields,
        "samples": m.samples,
        "bytes": m.bytes,
        "shards": {
            "count": len(sizes),
            "min_bytes": sizes[0] if sizes else 0,
            "median_bytes": sizes[len(sizes) // 2] if sizes else 0,
            "max_bytes": sizes[-1] if sizes else 0,
        },
        "stages": [vars(s) for s in m.stages],
        "rejected_rows": m.rejected_rows,
        "lineage": {
            "sources": len(m.lineage.sources),
            "code": [vars(c) for c in m.lineage.code],
            "seed": m.lineage.seed,
            "environment": m.lineage.environment,
        },
        **({"splits": _splits(m)} if m.splits is not None else {}),
        **({"classes": list(m.classes)} if m.classes is not None else {}),
    }


def _token_lines(t: dict[str, Any]) -> str:
    """A token version's counts, ids and tokenizer, and its documents' length distribution."""
    ids = ", ".join(
        f"{k} {'-' if t[k] is None else t[k]}" for k in ("vocab_size", "eos_id", "bos_id")
    )
    made = (
        f"tokenizer sha256 {short_id(t['tokenizer_sha256'])} (tokenizers {t['tokenizer_library']})"
        if t["tokenizer_sha256"]
        else "no tokenizer recorded"
    )
    lengths = t["lengths"] or {}
    shown = ", ".join(f"{k} {v}" for k, v in lengths.items()) or "-"
    return (
        f"  tokens: {t['tokens']} in {t['documents']} documents, {t['dtype']} ids ({ids}), {made}\n"
        f"  document lengths in tokens: {shown}"
    )


SHOWN_CLASSES = 20  # `info` lists this many class names, then how many more (--json lists them all)


def _classes_line(classes: tuple[str, ...]) -> str:
    """``N classes: 0 cat, 1 dog, ...``: the labels and names, cut after SHOWN_CLASSES."""
    shown = ", ".join(f"{i} {name}" for i, name in enumerate(classes[:SHOWN_CLASSES]))
    more = (
        f", ... and {len(classes) - SHOWN_CLASSES} more (info --json lists all)"
        if len(classes) > SHOWN_CLASSES
        else ""
    )
    return f"  {len(classes)} classes (label name): {shown}{more}"


def _splits(m: Manifest) -> dict[str, Any]:
    """The splits section of `info --json`: by, seed and per split its fraction, samples and
    shards."""
    assert m.splits is not None
    return {
        "by": m.splits.by,
        "seed": m.splits.seed,
        "splits": {
            name: {
                "fraction": m.splits.fractions[name],
                "samples": m.splits.samples[name],
                "shards": len(m.split_shards(name)),
            }
            for name in m.splits.names
        },
    }


@click.command()
@click.argument("dataset")
@json_option
def info(dataset: str, as_json: bool) -> None:
    """Summarise the manifest of DATASET (STORE/NAME[@REF]): fields, shards, stage counts,
    lineage; of a token version also its documents, tokens, ids, tokenizer and the spread of its
    documents' lengths."""
    store, name, m = open_dataset_url(dataset, storage_options())
    s = _summary(m)
    tokens = token_summary(store, name, m)
    if tokens is not None:
        s["tokens"] = tokens
    if as_json:
        echo_json(s)
        return
    click.echo(f"{m.name}@{short_id(m.version)}  ({m.version})")
    click.echo(
        f"  created {shown_time(m.created_at)} on {m.host or '?'}, parent "
        f"{short_id(m.parent) if m.parent else '-'}"
    )
    click.echo(
        f"  {m.samples} samples in {s['shards']['count']} {m.shard_format} "
        f"shards, {format_size(m.bytes)} "
        f"(shard sizes {format_size(s['shards']['min_bytes'])} .. "
        f"{format_size(s['shards']['max_bytes'])})"
    )
    click.echo("  fields: " + (", ".join(f"{k}:{v}" for k, v in m.fields.items()) or "-"))
    if tokens is not None:
        click.echo(_token_lines(tokens))
    if m.classes is not None:
        click.echo(_classes_line(m.classes))
    if m.splits is not None:
        click.echo(
            f"  splits by {m.splits.by or 'the sample key'} (splits.seed {m.splits.seed}): "
            + ", ".join(
                f"{name} {part['samples']} ({part['fraction']:g}, {part['shards']} shards)"
                for name, part in s["splits"]["splits"].items()
            )
        )
    for st in m.stages:
        click.echo(
            f"  stage {st.stage}: in {st.rows_in}, out {st.rows_out}, dropped "
            f"{st.dropped}, rejected {st.rejected}"
        )
    lin = m.lineage
    shuffle = "not shuffled" if lin.seed is None else f"shards.shuffle_seed {lin.seed}"
    click.echo(
        f"  lineage: {len(lin.sources)} source files, {shuffle}, "
        + ", ".join(f"{k} {v}" for k, v in sorted(lin.environment.items()))
    )
    for c in lin.code:
        click.echo(f"  code: {c.module} sha256 {short_id(c.sha256)}")


@click.command()
@click.argument("dataset")
def verify(dataset: str) -> None:
    """Re-hash every shard and index of DATASET against its manifest (exit 1 on any problem)."""
    store_url, name, ref = parse_dataset_url(dataset)
    store = Store(store_url, storage_options())
    version = store.resolve(name, ref)
    m = store.manifest(name, version)
    problems = verify_version(store, name, m, version)
    for p in problems:
        click.echo(str(p))
    if problems:
        click.echo(f"error: {name}@{short_id(m.version)}: {len(problems)} problem(s)", err=True)
        sys.exit(1)
    click.echo(
        f"{name}@{short_id(m.version)}: the manifest and its {len(m.shards)} "
        "shards and indexes match" + (f", {m.rejected} present" if m.rejected else "")
    )


@click.command()
@click.argument("dataset")
@click.argument("tag")
def tag(dataset: str, tag: str) -> None:
    """Point TAG at the version DATASET names."""
    store, name, m = open_dataset_url(dataset, storage_options())
    store.set_ref(name, check_ref_name(tag), m.version)
    click.echo(f"{name}@{tag} -> {short_id(m.version)}")


@click.command()
@click.argument("a")
@click.argument("b")
@json_option
def diff(a: str, b: str, as_json: bool) -> None:
    """Samples added, removed and changed (by key and content hash) from version A to B; per split
    too, when either has splits (a sample that changed split is removed from one and added to the
    other); between token versions, the documents and tokens added and removed too."""
    (sa, na, ma), (sb, nb, mb) = (open_dataset_url(url, storage_options()) for url in (a, b))
    # reads only the shards the two do not share
    pair = VersionPair(Side(sa, na, ma), Side(sb, nb, mb))
    d, per_split, tokens = pair.diff(), pair.splits(), pair.tokens()
    if as_json:
        echo_json(
            {
                "a": ma.version,
                "b": mb.version,
                **vars(d),
                **({"splits": {s: vars(sd) for s, sd in per_split.items()}} if per_split else {}),
                **({"tokens": vars(tokens)} if tokens is not None else {}),
            }
        )
        return
    click.echo(f"{na}@{short_id(ma.version)} -> {nb}@{short_id(mb.version)}: {_counts(d)}")
    if tokens is not None:
        click.echo(
            f"  documents: {tokens.documents_added} added, {tokens.documents_removed} removed; "
            f"tokens: {tokens.tokens_added} added, {tokens.tokens_removed} removed"
        )
    for split, sd in per_split.items():
        click.echo(f"  split {split}: {_counts(sd)}")
    for mark, keys in (("+", d.added), ("-", d.removed), ("~", d.changed)):
        for key in keys:
            click.echo(f"{mark} {key}")
    new = set(d.added)
    # in both, in another split (new fractions)
    for split, sd in per_split.items() if ma.splits is not None else ():
        for key in sd.added:
            if key not in new:
                click.echo(f"> {key} (moved to split {split})")


def _counts(d: VersionDiff) -> str:
    return (
        f"{len(d.added)} added, {len(d.removed)} removed, {len(d.changed)} "
        f"changed, {d.unchanged} unchanged"
    )


def dataset_of(dataset: str, verb: str) -> tuple[Store, str]:
    """The store and name of 'STORE/NAME' for a verb that works on a whole dataset; clear errors
    otherwise."""
    store_url, name, _ = parse_dataset_url(dataset)
    if "@" in dataset.rstrip("/").rsplit("/", 1)[-1]:
        raise ConfigError(f"{dataset}: {verb} a whole dataset; give STORE/NAME without @REF")
    store = Store(store_url, storage_options())
    if name not in store.datasets():
        inner = Store(dataset, storage_options()).datasets()
        if inner:
            raise ConfigError(
                f"{dataset} is a store, not a dataset: {verb} one dataset at a time; name one of "
                + ", ".join(f"{dataset.rstrip('/')}/{d}" for d in inner)
            )
        raise store.no_dataset(name, "give STORE/NAME")
    return store, name


@click.command()
@click.argument("dataset")
@click.option(
    "--prune",
    is_flag=True,
    help="Also delete complete versions that no ref names and no lease holds.",
)
@click.option(
    "--keep-last",
    type=int,
    metavar="N",
    help="Keep the N newest versions; delete the others outside --keep-within "
    "(never a tagged, latest or leased one).",
)
@click.option(
    "--keep-within",
    metavar="DURATION",
    help="Keep versions created within DURATION (30d, 12h, 2w).",
)
@click.option(
    "--dry-run", is_flag=True, help="Print what would be deleted, with sizes; delete nothing."
)
def gc(
    dataset: str, prune: bool, keep_last: int | None, keep_within: str | None, dry_run: bool
) -> None:
    """Remove partial versions and temporary files of DATASET (STORE/NAME); with --prune,
    --keep-last or --keep-within also the versions retention does not keep (their files that kept
    versions share stay)."""
    if keep_last is not None and keep_last < 0:
        raise ConfigError(f"--keep-last {keep_last}: give 0 or more versions to keep")
    within = parse_duration(keep_within, "--keep-within") if keep_within is not None else None
    store, name = dataset_of(dataset, "gc cleans")
    report = collect(
        store, name, prune=prune, keep_last=keep_last, keep_within=within, dry_run=dry_run
    )
    plan, verb = report.plan, "would remove" if dry_run else "removed"
    if plan is not None:
        for damaged in plan.damaged:
            click.echo(f"warning: {damaged}", err=True)
        for version, why in sorted(plan.kept.items(), key=lambda kv: kv[0]):
            click.echo(f"keep {short_id(version)} ({', '.join(why)})")
        for d in plan.doomed:
            if d.restored:
                click.echo(f"keep {short_id(d.version)} (leased while gc ran)")
                continue
            what = "pruned directory" if d.pruned_before else "version"
            shared = (
                f", keeping {len(d.kept)} files shared by kept versions "
                f"({format_size(sum(d.kept.values()))})"
                if d.kept
                else ""
            )
            click.echo(
                f"{'would delete' if dry_run else 'delete'} {what} {short_id(d.version)}: "
                f"{len(d.delete)} files, "
                f"{format_size(d.bytes)}{shared}"
            )
            if dry_run:
                for filename, size in sorted(d.delete.items()):
                    click.echo(f"  {filename} {format_size(size)}")
    for path in report.removed:
        click.echo(f"{verb} {path}")
    for path in report.kept_live:
        click.echo(f"kept {path} (its writer is still running)")
    freed = f", {format_size(plan.bytes)} freed" if plan is not None else ""
    click.echo(
        f"{len(report.removed)} {verb}{freed}" + (" (dry run: nothing deleted)" if dry_run else "")
    )
