"""`datapipe schema`: a pipeline's columns before building, or a built version's fields."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from datapipe.cli.options import echo_json, json_option, storage_options
from datapipe.errors import NotFoundError
from datapipe.storage.byte_size import format_size
from datapipe.versioning.manifest import Manifest, short_id

if TYPE_CHECKING:
    from datapipe.builder.preview import Column, SchemaPreview, StageOnSample

PIPELINE_SUFFIXES = (".yaml", ".yml")
REJECTING = ("cast", "validate", "image")  # stages that quarantine rows instead of dropping them
SHOWN_COLUMNS = 4  # columns a stage added or removed, named in the text table


@click.command()
@click.argument("target", metavar="PIPELINE|DATASET")
@json_option
def schema(target: str, as_json: bool) -> None:
    """Show the columns PIPELINE (a YAML file) gives, before building: each column's type and where
    it came from (inferred from which file and how much of it, declared, cast or added by which
    stage), the rows each stage keeps of the sample, and each sample field's kind. Reads only the
    sample the types are inferred from (the first MiB of a CSV or JSON lines source), no cluster.
    Given a built DATASET (STORE/NAME[@REF]) instead: its fields, their kinds and their columns."""
    if os.path.isfile(target) or target.endswith(PIPELINE_SUFFIXES):
        _pipeline_schema(target, as_json)
    else:
        _dataset_schema(target, as_json)


def _pipeline_schema(path: str, as_json: bool) -> None:
    from datapipe.builder.config import load_pipeline
    from datapipe.builder.preview import preview_schema

    loaded = load_pipeline(path)
    preview = preview_schema(loaded)
    if as_json:
        echo_json(pipeline_json(loaded.shown, loaded.pipeline.name, preview))
    else:
        _print_preview(loaded.pipeline.name, preview)
    if preview.failed is not None:
        raise loaded.located(preview.failed)


def _sample_words(preview: SchemaPreview) -> str:
    """Where the types came from: ``types inferred from a.csv: its first 1.0 MB, 3,000 rows``."""
    sample = preview.source.sample
    if not preview.sample_file:
        return "sample: none (the source has no file)"
    aside = f", {preview.set_aside:,} of them rejected by the reader" if preview.set_aside else ""
    if sample is None:
        return f"sample: {preview.sample_file}, its first partition, {preview.rows:,} rows{aside}"
    size = next((f.size for f in preview.source.files if f.label == sample.file), None)
    extent = "the whole file" if size == sample.bytes else "its first"
    return (
        f"types inferred from {sample.file}: {extent} {format_size(sample.bytes)}, "
        f"{preview.rows:,} rows{aside}"
    )


def _origin(column: Column, fmt: str) -> str:
    """Where a column's type came from, in words."""
    was = f" (was {column.was})" if column.was and column.was != column.type else ""
    return {
        "inferred": "inferred from the sample",
        "declared": "declared in source.options.dtype",
        "source": f"the {fmt} source's own",
        "cast": f"cast by {column.stage}{was}",
        "added": f"added by {column.stage}",
        "changed": f"changed by {column.stage}{was}",
    }[column.origin]


def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[-1])


def _print_preview(name: str, preview: SchemaPreview) -> None:
    src = preview.source
    files = f"{len(src.files)} file" + ("s" if len(src.files) != 1 else "")
    click.echo(f"{name}: {src.format} source, {files}")
    click.echo(_sample_words(preview))
    click.echo()
    _table(
        [("COLUMN", "TYPE", "FROM")]
        + [(c.name, c.type, _origin(c, src.format)) for c in preview.columns]
    )
    if preview.stages:
        click.echo()
        rows = [("STAGE", "ROWS OF THE SAMPLE")]
        for s in preview.stages:
            rows.append((s.shown, f"{s.rows_in:,} in, {s.rows_out:,} out{_stage_words(s)}"))
        _table(rows)
    if preview.fields:
        click.echo()
        _table(
            [("FIELD", "KIND", "COLUMNS")]
            + [(name, "|".join(kinds) or "-", cols) for name, kinds, cols in _fields(preview)]
        )


def _stage_words(step: StageOnSample) -> str:
    """What a stage did to the sample besides its counts: the rows it dropped or rejected, the
    columns it added and removed."""
    words = []
    gone = step.rows_in - step.rows_out
    if gone:
        share = gone / step.rows_in
        verb = "rejected" if step.stage.rsplit(".", 1)[-1] in REJECTING else "dropped"
        words.append(f"{gone:,} {verb}, {f'{share:.0%}' if share >= 0.01 else '<1%'}")
    for verb, columns in (("adds", step.added), ("removes", step.removed)):
        if columns:
            shown = ", ".join(columns[:SHOWN_COLUMNS])
            more = f", ... ({len(columns)} columns)" if len(columns) > SHOWN_COLUMNS else ""
            words.append(f"{verb} {shown}{more}")
    return f" ({'; '.join(words)})" if words else ""


def _fields(preview: SchemaPreview) -> list[tuple[str, tuple[str, ...], str]]:
    return [
        (name, kinds, ", ".join(preview.field_columns.get(name, ())))
        for name, kinds in preview.fields.items()
    ]


def pipeline_json(shown: str, name: str, preview: SchemaPreview) -> dict[str, Any]:
    """`schema PIPELINE --json`: the source and its sample, the columns, the stages, the fields."""
    src, sample = preview.source, preview.source.sample
    return {
        "pipeline": shown,
        "name": name,
        "source": {
            "format": src.format,
            "files": len(src.files),
            "sample": {
                "file": preview.sample_file,
                "bytes": sample.bytes if sample is not None else None,
                "rows": preview.rows,
                "set_aside": preview.set_aside,
            },
        },
        "columns": [
            {"name": c.name, "type": c.type, "from": c.origin, "stage": c.stage, "was": c.was}
            for c in preview.columns
        ],
        "stages": [
            {
                "stage": s.stage,
                "in": s.rows_in,
                "out": s.rows_out,
                "added": list(s.added),
                "removed": list(s.removed),
            }
            for s in preview.stages
        ],
        "fields": [
            {"field": n, "kinds": list(kinds), "columns": list(preview.field_columns.get(n, ()))}
            for n, kinds in preview.fields.items()
        ],
        "error": str(preview.failed) if preview.failed is not None else None,
    }


def _dataset_schema(dataset: str, as_json: bool) -> None:
    from datapipe.versioning.store import open_dataset_url

    try:
        _, _, m = open_dataset_url(dataset, storage_options())
    except NotFoundError as e:
        raise NotFoundError(
            f"{e}; `datapipe schema` takes a pipeline file (a .yaml path) or a dataset "
            "(STORE/NAME[@REF])"
        ) from None
    fields = dataset_fields(m)
    if as_json:
        echo_json(
            {
                "dataset": m.name,
                "version": m.version,
                "samples": m.samples,
                "shard_format": m.shard_format,
                "fields": fields,
            }
        )
        return
    click.echo(f"{m.name}@{short_id(m.version)}: {m.samples:,} samples, {m.shard_format} shards")
    click.echo()
    _table(
        [("FIELD", "KIND", "COLUMNS")]
        + [(f["field"], "|".join(f["kinds"]) or "-", ", ".join(f["columns"])) for f in fields]
    )


def dataset_fields(m: Manifest) -> list[dict[str, Any]]:
    """The fields of a built version: each one's kinds (as stored) and the columns it was made of
    (from the pipeline in its lineage), the sample key first."""
    sample = m.lineage.pipeline.get("sample") or {}
    specs = sample.get("fields") or {}
    key = sample.get("key")
    out = [{"field": "__key__", "kinds": ["str"], "columns": [key] if key else []}]
    for name, kinds in m.fields.items():
        spec = specs.get(name, [])
        columns = [spec] if isinstance(spec, str) else list(spec)
        out.append({"field": name, "kinds": kinds.split("|") if kinds else [], "columns": columns})
    return out
