"""Garbage collection: partial versions and temporary files always; versions outside retention on
request."""

from __future__ import annotations

import datetime
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from datapipe.errors import NotFoundError
from datapipe.storage.fs import read_bytes
from datapipe.versioning.layout import OWNER_NAME, PARTIAL_PREFIX, REFS, VERSIONS
from datapipe.versioning.manifest import MANIFEST_NAME
from datapipe.versioning.retention import (
    PRUNED_NAME,
    RetentionPlan,
    apply_retention,
    plan_retention,
)
from datapipe.versioning.store import Store

STALE_AFTER = 24 * 3600  # a partial version from another host is taken as abandoned after this


@dataclass
class GcReport:
    """Paths removed, and partial versions kept because their writer may still be running."""

    removed: list[str] = field(default_factory=list)
    kept_live: list[str] = field(default_factory=list)
    plan: RetentionPlan | None = None  # the versions kept and deleted, with retention


def _writer_alive(store: Store, partial: str, now: float) -> bool:
    try:
        owner = json.loads(read_bytes(store.fs, f"{partial}/{OWNER_NAME}"))
    except NotFoundError:  # no owner file: the writer died before writing it
        return False
    except ValueError:  # an owner file cut short: the same
        return False
    if owner.get("host") == socket.gethostname():
        try:
            os.kill(int(owner["pid"]), 0)
        except (ProcessLookupError, ValueError, KeyError):
            return False
        except PermissionError:
            return True
        return True
    try:
        age = now - datetime.datetime.fromisoformat(owner["started"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return False
    return age < STALE_AFTER


def _committing(store: Store, partial: str) -> str | None:
    """The version a live writer is committing (its owner file names it while its shards move), if
    any."""
    try:
        return json.loads(read_bytes(store.fs, f"{partial}/{OWNER_NAME}")).get("committing")
    except (NotFoundError, ValueError, AttributeError):
        return None


def collect(
    store: Store,
    name: str,
    prune: bool = False,
    *,
    keep_last: int | None = None,
    keep_within: float | None = None,
    dry_run: bool = False,
) -> GcReport:
    """Remove abandoned partial versions, incomplete version directories and temporary files.

    With ``prune``, ``keep_last`` or ``keep_within``, also the complete versions retention does not
    keep (versioning/retention.py): never one a ref names or a lease holds, never a file a kept
    version lists.
    Never removes what a live writer on this host is still writing. ``dry_run``: change nothing; the
    report says what would go (``plan``).
    """
    fs, report, now = store.fs, GcReport(), time.time()

    # retried on object stores, like every store call
    def remove(path: str, *, recursive: bool = False) -> None:
        if not dry_run:
            store.remote(
                path, lambda: fs.rm(path, recursive=True) if recursive else fs.rm_file(path)
            )
        report.removed.append(path)

    _sweep_versions(store, name, now, report, remove)
    for ref in store.entry_names(store.path(name, REFS)):
        if ref.startswith("."):
            remove(store.path(name, REFS, ref))
    if prune or keep_last is not None or keep_within is not None:
        report.plan = plan_retention(
            store, name, prune=prune, keep_last=keep_last, keep_within=keep_within, now=now
        )
        if not dry_run:
            report.removed += apply_retention(store, name, report.plan)
        for version in report.plan.kept:
            # a gc that died before the manifest went
            marker = store.path(name, VERSIONS, version, PRUNED_NAME)
            if not dry_run and store.remote(marker, lambda m=marker: fs.exists(m)):
                remove(marker)
    return report


def _sweep_versions(
    store: Store, name: str, now: float, report: GcReport, remove: Callable[..., None]
) -> None:
    """Remove (with ``remove``) what is in the versions directory of ``name`` but in no version:
    partial directories of dead writers, directories without a manifest, temporary files; note the
    partial directories of live writers in ``report``."""
    fs, versions_dir = store.fs, store.path(name, VERSIONS)
    entries = store.entry_names(versions_dir)
    live = [
        e
        for e in entries
        if e.startswith(PARTIAL_PREFIX) and _writer_alive(store, f"{versions_dir}/{e}", now)
    ]
    # their shards move in right now
    committing = {_committing(store, f"{versions_dir}/{e}") for e in live}
    for entry in entries:
        path = f"{versions_dir}/{entry}"
        if entry in live:
            report.kept_live.append(path)
            continue
        if entry.startswith(PARTIAL_PREFIX):
            pass
        elif entry.startswith("."):  # temporary files of interrupted atomic writes
            pass
        elif store.remote(path, lambda path=path: fs.exists(f"{path}/{MANIFEST_NAME}")):
            for leftover in store.remote(path, lambda path=path: fs.find(path)):
                if leftover.rsplit("/", 1)[-1].startswith("."):
                    remove(leftover)
            continue
        elif store.remote(path, lambda path=path: fs.exists(f"{path}/{PRUNED_NAME}")):
            continue  # shared files of a pruned version: retention's to remove
        elif entry in committing:  # a live build moves its shards in (its manifest comes last)
            report.kept_live.append(path)
            continue
        remove(path, recursive=True)
