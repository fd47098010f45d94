"""`datapipe dvc` and `datapipe check`: track a pipeline with DVC, and prove a version can be
rebuilt."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import tempfile
import uuid
from collections.abc import Iterator

import click

from datapipe.cli.options import scheduler_timeout_option, storage_options
from datapipe.errors import ConfigError
from datapipe.versioning.dvc import (
    DVC_IGNORE,
    build_stage,
    find_repo,
    relative,
    update_dvc_yaml,
    update_dvcignore,
)
from datapipe.versioning.layout import parse_dataset_url
from datapipe.versioning.manifest import short_id
from datapipe.versioning.rebuild_report import manifest_differences, sample_differences
from datapipe.versioning.store import Store
from datapipe.versioning.verify import verify_version

SCRATCH_PREFIX = ".check-"  # not a dataset name (names start with a letter or digit)

_GLOB = re.compile(r"[*?\[]")


def _source_dep(url: str) -> str:
    """What DVC watches for a source: the file, or for a glob the directory above its first
    wildcard."""
    if "://" in url or not _GLOB.search(url):
        return url
    head = url[: _GLOB.search(url).start()]
    return os.path.dirname(head) or "."


@click.command(name="dvc")
@click.argument("pipeline", type=click.Path(dir_okay=False))
@click.option(
    "--out",
    "store_url",
    default="storage",
    show_default=True,
    help="Local store the stage builds into.",
)
def dvc_stage(pipeline: str, store_url: str) -> None:
    """Add or update the dvc.yaml stage that builds PIPELINE, so `dvc repro` rebuilds it when an
    input changes."""
    from datapipe.builder.config import load_pipeline
    from datapipe.builder.lineage import code_files
    from datapipe.builder.source.listing import source_url

    if "://" in store_url:
        raise ConfigError(
            f"--out {store_url}: DVC tracks a local store; push it to a DVC remote with `dvc push`"
        )
    loaded = load_pipeline(pipeline)
    p = loaded.pipeline
    root = find_repo(os.getcwd())
    pipeline_rel = relative(loaded.path, root)
    store_rel = relative(store_url, root)
    deps = [
        pipeline_rel,
        relative(_source_dep(source_url(p.source, loaded.base_dir)), root),
        *(relative(f, root) for f in code_files(p, loaded.base_dir).values()),
        # the tokenize stage's file, where it is a local one: a new one makes a new version
        *(
            relative(os.path.join(loaded.base_dir, s.args.tokenizer), root)
            for s in p.stages
            if s.kind == "tokenize" and "://" not in s.args.tokenizer
        ),
    ]
    cmd = f"datapipe build {shlex.quote(pipeline_rel)} --out {shlex.quote(store_rel)}"
    stage = re.sub(r"[^A-Za-z0-9_-]", "_", p.name)
    path = update_dvc_yaml(root, stage, build_stage(cmd, deps, f"{store_rel}/{p.name}"))
    ignored = update_dvcignore(root, f"{store_rel}/{p.name}")
    click.echo(f"{relative(str(path), root)}: stage {stage!r}: {cmd}")
    click.echo(f"  deps: {', '.join(deps)}")
    click.echo(f"  outs: {store_rel}/{p.name} (persist)")
    if ignored:
        click.echo(
            f"{DVC_IGNORE}: {', '.join(ignored)} (readers' leases and partial "
            "builds are not the dataset)"
        )
    click.echo("run `dvc repro` to build, then commit dvc.yaml, dvc.lock and .dvcignore")


@click.command()
@click.argument("pipeline", type=click.Path(dir_okay=False))
@click.argument("dataset", required=False)
@click.option(
    "--out",
    "store_url",
    default="storage",
    show_default=True,
    help="Store of the recorded version, when DATASET is not given (then STORE/NAME@latest).",
)
@click.option("--workers", type=int, envvar="DATAPIPE_WORKERS", help="Dask workers of the rebuild.")
@click.option("--scheduler", help="Rebuild on an existing Dask cluster.")
@scheduler_timeout_option
@click.pass_context
def check(
    ctx: click.Context,
    pipeline: str,
    dataset: str | None,
    store_url: str,
    workers: int | None,
    scheduler: str | None,
    scheduler_timeout: float | None,
) -> None:
    """Rebuild PIPELINE into a temporary store and compare with DATASET; exit 1 naming what differs.

    With --scheduler the rebuild goes to a scratch prefix of DATASET's own store (STORE/.check-ID,
    removed after), which the cluster's workers can reach without a file system shared with this
    machine."""
    from datapipe.builder.config import load_pipeline
    from datapipe.builder.run import Execution, build

    loaded = load_pipeline(pipeline)
    url = dataset or f"{store_url.rstrip('/')}/{loaded.pipeline.name}"
    store_url, name, ref = parse_dataset_url(url)
    store = Store(store_url, storage_options())
    version = store.resolve(name, ref)
    recorded = store.manifest(name, version)
    problems = [f"stored {p}" for p in verify_version(store, name, recorded, version)]
    with _scratch_store(store, scheduler is not None) as rebuilt_store:
        execution = Execution(
            workers=workers, scheduler=scheduler, scheduler_timeout=scheduler_timeout
        )
        rebuilt = build(loaded, rebuilt_store, execution=execution).manifest
        differences = []
        if rebuilt.version != recorded.version:
            differences = manifest_differences(recorded, rebuilt)
            if not problems:  # damaged stored shards cannot be read back sample by sample
                differences += sample_differences(
                    (store, name, recorded), (rebuilt_store, rebuilt.name, rebuilt)
                )
    if not problems and not differences:
        click.echo(
            f"reproducible: {name}@{short_id(recorded.version)} rebuilds to the same version"
        )
        return
    if differences:
        click.echo(
            f"not reproducible: {name}@{short_id(recorded.version)} rebuilds to "
            f"{short_id(rebuilt.version)}"
        )
    for line in problems + differences:
        click.echo(f"  {line}")
    ctx.exit(1)


@contextlib.contextmanager
def _scratch_store(store: Store, in_store: bool) -> Iterator[Store]:
    """An empty store for a rebuild: a local temporary directory, or (``in_store``) a hidden prefix
    of ``store``."""
    if not in_store:
        with tempfile.TemporaryDirectory(prefix="datapipe-check-") as tmp:
            yield Store(tmp)
        return
    # absolute: the workers may run elsewhere
    base = store.url if "://" in store.url else store.root
    scratch = Store(
        f"{base.rstrip('/')}/{SCRATCH_PREFIX}{uuid.uuid4().hex[:12]}", storage_options()
    )
    click.echo(f"rebuilding into {scratch.url} (removed after)", err=True)
    try:
        yield scratch
    finally:
        root = scratch.path()
        if scratch.fs.exists(root):
            scratch.remote(root, lambda: scratch.fs.rm(root, recursive=True))
