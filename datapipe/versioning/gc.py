"""Garbage collection: partial versions and temporary files always; unreferenced versions on request."""

from __future__ import annotations

import datetime
import json
import os
import socket
import time
from dataclasses import dataclass, field

from datapipe.errors import NotFoundError
from datapipe.storage.fs import read_bytes
from datapipe.versioning.manifest import MANIFEST_NAME
from datapipe.versioning.store import OWNER_NAME, PARTIAL_PREFIX, REFS, VERSIONS, Store

STALE_AFTER = 24 * 3600  # a partial version from another host is taken as abandoned after this


@dataclass
class GcReport:
    """Paths removed, and partial versions kept because their writer may still be running."""

    removed: list[str] = field(default_factory=list)
    kept_live: list[str] = field(default_factory=list)


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


def collect(store: Store, name: str, prune: bool = False) -> GcReport:
    """Remove abandoned partial versions, incomplete version directories and temporary files.

    With ``prune``, also complete versions that no ref names. Never removes what a live writer
    on this host is still writing.
    """
    fs, report, now = store.fs, GcReport(), time.time()
    versions_dir = store.path(name, VERSIONS)
    referenced = set(store.refs(name).values())

    def remove(path: str, *, recursive: bool = False) -> None:  # retried on object stores, like every store call
        store.remote(path, lambda: fs.rm(path, recursive=True) if recursive else fs.rm_file(path))
        report.removed.append(path)

    for entry in store.entry_names(versions_dir):
        path = f"{versions_dir}/{entry}"
        if entry.startswith(PARTIAL_PREFIX):
            if _writer_alive(store, path, now):
                report.kept_live.append(path)
                continue
        elif entry.startswith("."):  # temporary files of interrupted atomic writes
            pass
        elif store.remote(path, lambda path=path: fs.exists(f"{path}/{MANIFEST_NAME}")):
            if not prune or entry in referenced:
                for leftover in store.remote(path, lambda path=path: fs.find(path)):
                    if leftover.rsplit("/", 1)[-1].startswith("."):
                        remove(leftover)
                continue
        remove(path, recursive=True)
    for ref in store.entry_names(store.path(name, REFS)):
        if ref.startswith("."):
            remove(store.path(name, REFS, ref))
    return report
