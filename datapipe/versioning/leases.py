"""Leases: a reader's (or a person's) hold on a version, a small JSON record that retention never
deletes under.

Layout: STORE/NAME/leases/ID.json, one file per lease, written atomically (one PUT on object
stores):
``{"id", "version", "host", "pid", "started", "expires", "note", "kind"}``. A lease holds while it
has not expired and, when it names a pid on this host, that process lives; a lease taken by hand has
no pid and holds until it expires. A reader's lease is renewed by a daemon thread every ttl/3 (one
small write, never per batch) and released on close, when its owner is garbage collected, and at
interpreter exit.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

from datapipe.errors import ConfigError, DatapipeError, NotFoundError
from datapipe.storage.fs import is_local, put_atomic, read_bytes
from datapipe.storage.retry import RetryPolicy
from datapipe.versioning.manifest import short_id

T = TypeVar("T")


class LeaseStore(Protocol):
    """What leases need of a store (versioning/store.py's Store): leases sit below it, and its
    writer takes them."""

    url: str
    fs: Any
    retry: RetryPolicy

    def path(self, *parts: str) -> str:
        """The path of ``parts`` below the store root."""

    def remote(self, path: str, call: Callable[[], T]) -> T:
        """``call()`` with the store's retries."""

    def entry_names(self, path: str) -> list[str]:
        """The names in directory ``path``."""

    def is_complete(self, name: str, version: str) -> bool:
        """Whether version ``version`` of ``name`` is committed."""


log = logging.getLogger(__name__)
LEASES = "leases"
DEFAULT_TTL = 600.0  # seconds a reader's lease lasts without renewal; renewed every third of it
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_LEASE_ID = re.compile(r"^[0-9a-f]{16}$")


def parse_duration(text: str, option: str = "--for") -> float:
    """'90s', '30m', '12h', '7d', '2w' -> seconds; a ConfigError naming ``option`` for anything
    else."""
    match = _DURATION.match(text)
    if not match or float(match[1]) <= 0:
        raise ConfigError(
            f"{option} {text!r}: not a duration; give a positive number and a unit: "
            "s, m, h, d or w "
            "(e.g. 90s, 30m, 12h, 7d, 2w)"
        )
    return float(match[1]) * _UNITS[match[2]]


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


@dataclass(frozen=True)
class LeaseRecord:
    """One lease file: which version it holds, who holds it and until when (``expires``, ISO 8601
    UTC)."""

    id: str
    version: str
    host: str
    pid: int | None  # None: taken by hand, holds until it expires
    started: str
    expires: str
    note: str = ""
    # reader (a Loader or open_dataset), manual (`datapipe lease`), build (a writer)
    kind: str = "reader"

    def state(self, now: float | None = None) -> str:
        """'holds', 'expired', or 'dead' (its process on this host has ended)."""
        now = time.time() if now is None else now
        if datetime.datetime.fromisoformat(self.expires).timestamp() <= now:
            return "expired"
        alive = self.pid is None or self.host != socket.gethostname() or _pid_alive(self.pid)
        return "holds" if alive else "dead"

    def holds(self, now: float | None = None) -> bool:
        """Whether the lease counts: not expired, and its process (on this host) alive."""
        return self.state(now) == "holds"

    def to_json(self) -> bytes:
        """The file's bytes."""
        return json.dumps(asdict(self), sort_keys=True).encode() + b"\n"


def _parse(data: bytes) -> LeaseRecord:
    raw = json.loads(data)
    if not isinstance(raw, dict):
        raise ValueError("expected a JSON object")
    record = LeaseRecord(**raw)  # TypeError for a missing or unknown field
    for name in ("id", "version", "host", "started", "expires", "note", "kind"):
        if not isinstance(getattr(record, name), str):
            raise ValueError(f"field {name!r} is not a string")
    if record.pid is not None and (not isinstance(record.pid, int) or isinstance(record.pid, bool)):
        raise ValueError("field 'pid' is not an integer")
    datetime.datetime.fromisoformat(record.expires)
    return record


@dataclass(frozen=True)
class Damaged:
    """A lease file that cannot be read as a lease: reported, and taken as not holding."""

    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: damaged lease file ({self.problem}); it holds nothing; delete it"


def lease_path(store: LeaseStore, name: str, lease_id: str) -> str:
    """Where lease ``lease_id`` of dataset ``name`` lies."""
    return store.path(name, LEASES, f"{lease_id}.json")


def read_leases(store: LeaseStore, name: str) -> tuple[list[LeaseRecord], list[Damaged]]:
    """Every lease file of ``name`` (held or not, oldest first), and the damaged ones."""
    records, damaged = [], []
    for entry in store.entry_names(store.path(name, LEASES)):
        if entry.startswith(".") or not entry.endswith(".json"):
            continue  # temporary files of atomic writes
        path = store.path(name, LEASES, entry)
        try:
            records.append(_parse(read_bytes(store.fs, path, store.retry)))
        except NotFoundError:  # released while listing
            continue
        except (ValueError, TypeError, UnicodeDecodeError) as e:
            damaged.append(Damaged(path, str(e)[:120]))
    records.sort(key=lambda r: (r.started, r.id))
    return records, damaged


def held_versions(
    store: LeaseStore, name: str, now: float | None = None
) -> tuple[dict[str, list[LeaseRecord]], list[Damaged]]:
    """version -> the leases that hold it now; and the damaged lease files (holding nothing)."""
    records, damaged = read_leases(store, name)
    held: dict[str, list[LeaseRecord]] = {}
    for record in records:
        if record.holds(now):
            held.setdefault(record.version, []).append(record)
    return held, damaged


def take_lease(
    store: LeaseStore,
    name: str,
    version: str,
    duration: float,
    note: str = "",
    *,
    pid: int | None = None,
    kind: str = "manual",
) -> LeaseRecord:
    """Write a new lease on ``version`` for ``duration`` seconds; a NotFoundError when the version
    is not (or no more) complete: the check comes after the write, so a gc that pruned it meanwhile
    sees the lease."""
    now = time.time()
    record = LeaseRecord(
        id=uuid.uuid4().hex[:16],
        version=version,
        host=socket.gethostname(),
        pid=pid,
        started=_iso(now),
        expires=_iso(now + duration),
        note=note,
        kind=kind,
    )
    path = lease_path(store, name, record.id)
    store.remote(path, lambda: put_atomic(store.fs, path, record.to_json()))
    if not store.is_complete(name, version):
        _remove(store, path)
        raise NotFoundError(
            f"{store.url}/{name}@{short_id(version)}: no such version (deleted by "
            "gc?); nothing leased"
        )
    return record


def _remove(store: LeaseStore, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        store.remote(path, lambda: store.fs.rm_file(path))
    # the last lease gone: no empty folder left in the dataset (object stores have none)
    if is_local(store.fs):
        with contextlib.suppress(OSError):
            os.rmdir(path.rsplit("/", 1)[0])


def release_lease(store: LeaseStore, name: str, lease_id: str) -> LeaseRecord | None:
    """Delete lease ``lease_id`` of ``name``: its record, or None when it is not there."""
    if not _LEASE_ID.match(lease_id):
        raise ConfigError(
            f"--release {lease_id!r}: not a lease id (16 hex digits, as `datapipe lease` printed)"
        )
    path = lease_path(store, name, lease_id)
    try:
        data = read_bytes(store.fs, path, store.retry)
    except NotFoundError:
        return None
    _remove(store, path)
    try:
        return _parse(data)
    except (ValueError, TypeError, UnicodeDecodeError):
        return LeaseRecord(lease_id, "?", "?", None, "?", "?", "damaged")


class Lease:
    """A reader's lease, renewed in the background until ``release`` (which only its own process
    does)."""

    def __init__(
        self,
        store: LeaseStore,
        name: str,
        version: str,
        ttl: float = DEFAULT_TTL,
        note: str = "",
        kind: str = "reader",
    ) -> None:
        self.store, self.name, self.ttl = store, name, ttl
        self.record = take_lease(store, name, version, ttl, note, pid=os.getpid(), kind=kind)
        self.path = lease_path(store, name, self.record.id)
        self._pid = os.getpid()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._renew, name=f"datapipe-lease-{self.record.id}", daemon=True
        )
        self._thread.start()

    @property
    def id(self) -> str:
        """The lease id (its file is leases/ID.json)."""
        return self.record.id

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            record = self.record = LeaseRecord(
                **{**asdict(self.record), "expires": _iso(time.time() + self.ttl)}
            )
            try:
                self.store.remote(
                    self.path, lambda r=record: put_atomic(self.store.fs, self.path, r.to_json())
                )
            # the next renewal tries again; the lease lasts ttl meanwhile
            except (DatapipeError, OSError) as e:
                log.warning("%s: could not renew the lease: %s", self.path, e)

    def release(self) -> None:
        """Stop renewing and delete the lease file (a no-op in a forked child, and the second
        time)."""
        if self._pid != os.getpid() or self._stop.is_set():
            return
        self._stop.set()
        try:
            _remove(self.store, self.path)
        except (DatapipeError, OSError) as e:
            log.warning("%s: could not release the lease (it expires by itself): %s", self.path, e)


def try_lease(store: LeaseStore, name: str, version: str, ttl: float | None) -> Lease | None:
    """A reader's lease, or None when ``ttl`` is None or the store refuses writes (a read-only
    bucket):
    reading must not fail because a lease cannot be written. A version gone meanwhile is still an
    error."""
    if not ttl:
        return None
    try:
        return Lease(store, name, version, ttl)
    except NotFoundError:
        raise
    except (DatapipeError, OSError) as e:
        log.warning(
            "%s/%s@%s: reading without a lease (%s); gc --keep-last may delete it meanwhile",
            store.url,
            name,
            short_id(version),
            e,
        )
        return None
