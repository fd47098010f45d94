"""The quarantine page (a version's rejected rows) and the diff page (added, removed, changed
samples)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse

from datapipe.errors import NotFoundError
from datapipe.loader.dataset import Dataset
from datapipe.serve.samples import PREVIEW, Field, read_sample
from datapipe.versioning.manifest import short_id
from datapipe.versioning.rejected import read_rows, version_quarantine, with_data
from datapipe.versioning.sample_diff import Side, VersionDiff, VersionPair
from datapipe.versioning.store import Store

# builder/accounting.py's: STORE/NAME/rejected/TIME-ID.parquet (a test keeps them equal)
FAILED_QUARANTINE = "rejected"

REJECTS = 100  # quarantined rows a page
CHANGED = 20  # changed samples a page of the diff (each shown from both sides)
KEYS = 200  # added or removed keys listed
DATA = 400  # characters of a rejected row's data shown


def _number(request: Request, name: str) -> int:
    raw = request.query_params.get(name, "") or "0"
    if not raw.isdigit() or int(raw) > 10**6:
        raise NotFoundError(f"?{name}={raw!r}: expected a number from 0 to 1000000")
    return int(raw)


def failed_builds(store: Store, name: str) -> list[str]:
    """The quarantine files that failed builds of ``name`` left
    (STORE/NAME/rejected/TIME-ID.parquet), newest first."""
    names = store.entry_names(store.path(name, FAILED_QUARANTINE))
    return sorted(
        (n for n in names if n.endswith(".parquet") and not n.startswith(".")), reverse=True
    )


def quarantine_page(c: Any, name: str, ref: str, request: Request) -> HTMLResponse:
    """The rejected rows of a version, filtered by stage and by a word of the reason, REJECTS a
    page."""
    ds = c.versions.dataset(name, ref)
    here = f"/d/{name}/v/{ds.version}/quarantine"
    path = version_quarantine(ds.store, ds.name, ds.manifest)
    return _rejects(c, request, ds.store, path, name=name, m=ds.manifest, here=here, failed=None)


def failed_page(c: Any, name: str, file: str, request: Request) -> HTMLResponse:
    """The rejected rows a failed build of ``name`` left in ``file`` (a name from the store's
    listing)."""
    name = c.versions.dataset_name(name)
    if file not in failed_builds(c.versions.store, name):
        raise NotFoundError(f"{name}: no failed build's quarantine {file!r}")
    store = c.versions.store
    path = store.path(name, FAILED_QUARANTINE, file)
    return _rejects(
        c, request, store, path, name=name, m=None, here=f"/d/{name}/failed/{file}", failed=file
    )


def _rejects(
    c: Any, request: Request, store: Store, path: str | None, **where: Any
) -> HTMLResponse:
    """A page of the rows of quarantine ``path``: read without their data, the page's rows then
    with it (a near_dedupe stage's quarantine holds the text of every document it removed)."""
    rows = read_rows(store, path, data=False) if path is not None else []
    stages = sorted({str(r.get("stage")) for r in rows})
    stage, reason = request.query_params.get("stage", ""), request.query_params.get("reason", "")
    if stage and stage not in stages:
        raise NotFoundError(f"{where['here']}: no rejected rows of stage {stage!r}")
    chosen = [
        r
        for r in rows
        if (not stage or r.get("stage") == stage) and reason in str(r.get("reason", ""))
    ]
    page = _number(request, "page")
    shown = [
        {**r, "data": str(r.get("data", ""))[:DATA], "cut": len(str(r.get("data", ""))) > DATA}
        for r in with_data(store, path, chosen[page * REJECTS : (page + 1) * REJECTS])
    ]
    return c.render(
        "quarantine.html",
        rows=shown,
        total=len(rows),
        matched=len(chosen),
        stages=stages,
        stage=stage,
        reason=reason,
        page=page,
        more=len(chosen) > (page + 1) * REJECTS,
        **where,
    )


class Diffs:
    """Sample diffs of version pairs, the last few kept (each costs reading the indexes of the
    shards the two versions do not share)."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._made: OrderedDict[tuple[str, str, str], tuple[VersionDiff, dict, dict]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()  # pages run on several threads; a diff is made outside it

    def get(self, a: Dataset, b: Dataset) -> tuple[VersionDiff, dict[str, Any], dict[str, Any]]:
        """The diff from ``a`` to ``b`` and each side's key -> (shard number, row)."""
        key = (a.name, a.version, b.version)
        with self._lock:
            if key in self._made:
                self._made.move_to_end(key)
                return self._made[key]
        # from the shards the two do not share: a few, after an incremental build
        pair = VersionPair(*(Side(ds.store, ds.name, ds.manifest) for ds in (a, b)))
        sides = [
            {k: (number[path], row) for k, (path, row, _) in side.items()}
            for side, number in zip(pair.locations(), (_numbers(a), _numbers(b)), strict=True)
        ]
        made = (pair.diff(), *sides)
        with self._lock:
            self._made[key] = made
            if len(self._made) > self.size:
                self._made.popitem(last=False)
        return made


def _numbers(ds: Dataset) -> dict[str, int]:
    """shard path -> its number in the version."""
    return {entry.path: i for i, entry in enumerate(ds.shards)}


def _fields(c: Any, ds: Dataset, shard: int, row: int) -> list[Field]:
    fields = c.fields(ds, read_sample(ds, shard, row), PREVIEW)  # a document decoded
    return sorted(fields, key=lambda f: f.kind != "image")


def diff_page(c: Any, name: str, request: Request) -> HTMLResponse:
    """Two versions (?a=REF&b=REF; b defaults to latest, a to b's parent): the keys added and
    removed, and the changed samples, CHANGED a page, each with both sides next to each other."""
    name = c.versions.dataset_name(name)
    b = c.versions.dataset(name, request.query_params.get("b") or "latest")
    a_ref = request.query_params.get("a") or b.manifest.parent
    if a_ref is None:
        raise NotFoundError(
            f"{name}@{short_id(b.version)} has no parent: pick the version to compare with (?a=REF)"
        )
    a = c.versions.dataset(name, a_ref)
    diff, where_a, where_b = c.diffs.get(a, b)
    page = _number(request, "page")
    changed = [
        {
            "key": k,
            "a": where_a[k],
            "b": where_b[k],
            "a_fields": _fields(c, a, *where_a[k]),
            "b_fields": _fields(c, b, *where_b[k]),
        }
        for k in diff.changed[page * CHANGED : (page + 1) * CHANGED]
    ]
    versions = sorted(
        c.versions.store.versions(name),
        key=lambda v: c.versions.store.manifest(name, v).created_at,
        reverse=True,
    )
    return c.render(
        "diff.html",
        name=name,
        a=a.manifest,
        b=b.manifest,
        diff=diff,
        changed=changed,
        page=page,
        more=len(diff.changed) > (page + 1) * CHANGED,
        added=diff.added[:KEYS],
        removed=diff.removed[:KEYS],
        where_b=where_b,
        where_a=where_a,
        keys=KEYS,
        versions=versions,
    )
