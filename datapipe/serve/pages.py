"""The pages: store, dataset, version, samples, one sample, and a sample field's thumbnail."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from jinja2 import Environment
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from datapipe.errors import DatapipeError, NotFoundError
from datapipe.loader.dataset import Dataset
from datapipe.serve import charts
from datapipe.serve.changes import Diffs, diff_page, failed_builds, failed_page, quarantine_page
from datapipe.serve.documents import Decoders
from datapipe.serve.resolve import Versions
from datapipe.serve.samples import PREVIEW, SHOWN, Field, Thumbnails, describe, read_sample
from datapipe.versioning.history import history
from datapipe.versioning.manifest import short_id, shown_time
from datapipe.versioning.token_stats import is_token_version

PAGE = 48  # samples per page of the grid
MAX_PAGE = 10**6


@dataclass
class Context:
    """What every page reads: the templates, the store's versions, the thumbnail cache, the
    token versions' tokenizers."""

    env: Environment
    versions: Versions
    thumbnails: Thumbnails
    diffs: Diffs = field(default_factory=Diffs)
    decoders: Decoders = field(default_factory=Decoders)

    def fields(self, ds: Dataset, sample: dict[str, Any], limit: int) -> list[Field]:
        """A sample's fields as pages show them, cut to ``limit``; a token version's ``tokens``
        decoded."""
        tokens = is_token_version(ds.manifest)
        return [
            self.decoders.field(ds, v, limit)
            if tokens and k == "tokens"
            else describe(k, v, ds.manifest.fields.get(k), limit)
            for k, v in sorted(sample.items())
            if k != "__key__"
        ]

    def render(self, template: str, **values: Any) -> HTMLResponse:
        """The page ``template`` filled with ``values`` (autoescaped) and the store's URL."""
        return HTMLResponse(
            self.env.get_template(template).render(store=self.versions.store.url, **values)
        )


def _int(request: Request, name: str, default: int, high: int = MAX_PAGE) -> int:
    raw = request.query_params.get(name, "")
    if not raw:
        return default
    if not raw.isdigit() or int(raw) > high:
        raise NotFoundError(f"?{name}={raw!r}: expected a number from 0 to {high}")
    return int(raw)


def store_page(c: Context) -> HTMLResponse:
    """Every dataset: its latest version, tags, samples, size, when it was built."""
    store, rows = c.versions.store, []
    for name in store.datasets():
        try:
            refs = store.refs(name)
            version = c.versions.version(name, "latest")
            m = store.manifest(name, version)
            rows.append(
                {
                    "name": name,
                    "version": version,
                    "tags": sorted(r for r, v in refs.items() if v == version),
                    "samples": m.samples,
                    "bytes": m.bytes,
                    "created": shown_time(m.created_at),
                    "versions": len(store.versions(name)),
                    "error": None,
                }
            )
        except DatapipeError as e:  # one broken dataset must not hide the others
            rows.append({"name": name, "error": str(e)})
    return c.render("store.html", datasets=rows)


def dataset_page(c: Context, name: str) -> HTMLResponse:
    """The versions of a dataset, newest first, with what changed against each parent."""
    name = c.versions.dataset_name(name)
    entries, problems = history(c.versions.store, name, c.versions.changes)
    nodes, edges = charts.parent_graph([(e.version, e.parent, e.tags) for e in entries])
    return c.render(
        "dataset.html",
        name=name,
        entries=entries,
        problems=problems,
        nodes=nodes,
        edges=edges,
        lanes=max((n.lane for n in nodes), default=0) + 1,
        row=charts.ROW,
        lane=charts.LANE,
        failed=failed_builds(c.versions.store, name),
    )


def version_page(c: Context, name: str, ref: str) -> HTMLResponse:
    """Fields, splits, classes, stage accounting, shard sizes and lineage of a version, and how to
    load it."""
    ds = c.versions.dataset(name, ref)
    m = ds.manifest
    stages = [
        (f"{s.stage} {what}", getattr(s, attr))
        for s in m.stages
        for what, attr in (
            ("in", "rows_in"),
            ("out", "rows_out"),
            ("dropped", "dropped"),
            ("rejected", "rejected"),
        )
    ]
    url = f"{c.versions.store.url}/{name}@{short_id(m.version)}"
    return c.render(
        "version.html",
        name=name,
        m=m,
        ds=ds,
        stage_bars=charts.bars(stages),
        shard_bars=charts.histogram([s.bytes for s in m.shards]),
        width=charts.WIDTH,
        height=charts.HEIGHT,
        loader=f"datapipe.Loader({url!r})",
    )


def _positions(ds: Dataset, split: str | None, prefix: str) -> Iterator[tuple[int, int, str]]:
    """(shard, row, key) of the samples in storage order, of one split and with keys starting with
    ``prefix``."""
    for shard, entry in enumerate(ds.shards):
        if split is not None and entry.split != split:
            continue
        if not prefix:
            for row in range(entry.samples):
                yield shard, row, ""
            continue
        index = ds.index(shard)
        for row, key in enumerate(index.keys()):
            if key.startswith(prefix):
                yield shard, row, key


def samples_page(c: Context, name: str, ref: str, request: Request) -> HTMLResponse:
    """A page of the sample grid: keys, a preview of every field, thumbnails of the images."""
    ds = c.versions.dataset(name, ref)
    split = request.query_params.get("split") or None
    if split is not None and (ds.manifest.splits is None or split not in ds.manifest.splits.names):
        raise NotFoundError(f"{name}@{short_id(ds.version)} has no split {split!r}")
    prefix = request.query_params.get("q", "")
    page = _int(request, "page", 0)
    found = list(_limited(_positions(ds, split, prefix), (page + 1) * PAGE + 1))
    shown = found[page * PAGE : (page + 1) * PAGE]
    cells = []
    for shard, row, _ in shown:
        sample = read_sample(ds, shard, row)
        fields = c.fields(ds, sample, PREVIEW)
        fields.sort(key=lambda f: f.kind != "image")  # the pictures at the top of each cell
        cells.append({"shard": shard, "row": row, "key": sample["__key__"], "fields": fields})
    return c.render(
        "samples.html",
        name=name,
        m=ds.manifest,
        cells=cells,
        page=page,
        split=split or "",
        q=prefix,
        more=len(found) > (page + 1) * PAGE,
        splits=ds.manifest.splits.names if ds.manifest.splits else [],
    )


def _limited(items: Iterator[Any], n: int) -> Iterator[Any]:
    for i, item in enumerate(items):
        if i >= n:
            return
        yield item


def sample_page(c: Context, name: str, ref: str, shard: int, row: int) -> HTMLResponse:
    """One sample, every field in full (large ones cut, with their size), its shard and byte
    offset."""
    ds = c.versions.dataset(name, ref)
    shard = c.versions.shard(ds, shard)
    sample = read_sample(ds, shard, row)
    start = int(ds.index(shard).sample_start[row])
    fields = c.fields(ds, sample, SHOWN)
    return c.render(
        "sample.html",
        name=name,
        m=ds.manifest,
        key=sample["__key__"],
        fields=fields,
        shard=shard,
        row=row,
        offset=start,
        shard_path=ds.shards[shard].path,
    )


def thumbnail(c: Context, name: str, ref: str, shard: int, row: int, field: str) -> Response:
    """A PNG thumbnail of an image field, made from that sample's bytes alone; 404 when it is not an
    image."""
    ds = c.versions.dataset(name, ref)
    shard = c.versions.shard(ds, shard)
    thumb = c.thumbnails.get(ds, shard, row, field)
    if thumb is None:
        raise NotFoundError(
            f"{name}@{short_id(ds.version)} shard {shard} sample {row}: field "
            f"{field!r} is not an image"
        )
    return Response(thumb, media_type="image/png", headers={"cache-control": "max-age=3600"})


Page = Callable[[Request], Awaitable[Response]]


def routes(c: Context) -> list[tuple[str, Page]]:
    """(path, handler) of every page; handlers run the store reads in threads, not on the event
    loop, side by side: what they share (opened versions, thumbnails, diffs) guards itself, and a
    Dataset's index cache is only read and refilled, never closed, here."""

    def page(fn: Callable[..., Response], with_request: bool = False) -> Page:
        async def handle(request: Request) -> Response:
            args = dict(request.path_params)
            if with_request:
                args["request"] = request
            return await run_in_threadpool(fn, c, **args)

        return handle

    version = "/d/{name}/v/{ref}"
    return [
        ("/", page(store_page)),
        ("/d/{name}", page(dataset_page)),
        ("/d/{name}/diff", page(diff_page, with_request=True)),
        ("/d/{name}/failed/{file}", page(failed_page, with_request=True)),
        (version, page(version_page)),
        (version + "/samples", page(samples_page, with_request=True)),
        (version + "/quarantine", page(quarantine_page, with_request=True)),
        (version + "/s/{shard:int}/{row:int}", page(sample_page)),
        (version + "/s/{shard:int}/{row:int}/{field}/thumb", page(thumbnail)),
    ]
