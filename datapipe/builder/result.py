"""What a build returns: the committed manifest, its URL and how the build went (``--json``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from datapipe.versioning.manifest import Manifest

if TYPE_CHECKING:
    from datapipe.builder.drops import DropWarning


@dataclass(frozen=True)
class SourceFileCounts:
    """The source files read for their hash, and those the parent's records vouched for."""

    hashed: int
    trusted: int


@dataclass(frozen=True)
class PartitionCounts:
    """The partitions the measure pass read, and those whose report came from the parent."""

    measured: int
    reused: int


@dataclass(frozen=True)
class ShardCounts:
    """The shards the write pass stored anew (and their bytes), and those that are files the
    dataset already stored: the parent's of the same samples, or any version's of the same
    bytes."""

    written: int
    reused: int
    bytes_written: int


@dataclass(frozen=True)
class IncrementalReport:
    """What a build took from its parent version (``parent``), or why it built everything."""

    parent: str | None  # the version whose partitions and shards carried over
    full_because: str | None  # None: partitions of ``parent`` could carry over
    source_files: SourceFileCounts
    partitions: PartitionCounts
    shards: ShardCounts

    def as_dict(self) -> dict[str, Any]:
        """The report as the ``incremental`` object of the ``--json`` summary."""
        return asdict(self)


@dataclass(frozen=True)
class Overhead:
    """The bytes of a version's shards on disk, of the fields they hold, and advice past
    ``overhead.ADVISE_ABOVE``."""

    on_disk: int
    payload: int
    advice: str | None

    @property
    def ratio(self) -> float:
        """Bytes on disk per byte of fields (1.0 for a version without fields)."""
        return self.on_disk / self.payload if self.payload else 1.0


@dataclass(frozen=True)
class BuildResult:
    """A committed build: its manifest and the dataset URL that pins it."""

    manifest: Manifest
    url: str
    # wall time: cluster start, each pass, total
    seconds: dict[str, float] = field(default_factory=dict)
    # "in-process" (a small source), "local cluster", "scheduler" or "client"
    ran_on: str = "cluster"
    # bytes: the largest peak resident memory of a worker (this process in process)
    worker_peak_rss: int | None = None
    # what came from the parent version, or why nothing
    incremental: IncrementalReport | None = None
    # the shards' bytes on disk against the bytes of the fields they hold
    overhead: Overhead | None = None
    # the stages that dropped more than half of their rows (``drops.DropWarning``)
    warnings: tuple[DropWarning, ...] = ()
    # what the stages want said, a line each (what a near_dedupe stage checked against)
    notes: tuple[str, ...] = ()

    def summary(self) -> dict[str, Any]:
        """The JSON object `datapipe build --json` prints."""
        m = self.manifest
        out = {
            "name": m.name,
            "version": m.version,
            "url": self.url,
            "samples": m.samples,
            "shards": len(m.shards),
            "bytes": m.bytes,
            "rejected": m.rejected_rows,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "ran_on": self.ran_on,
            "worker_peak_rss": self.worker_peak_rss,
            "incremental": self.incremental.as_dict() if self.incremental else {},
            "stages": [
                {
                    "stage": s.stage,
                    "in": s.rows_in,
                    "out": s.rows_out,
                    "dropped": s.dropped,
                    "rejected": s.rejected,
                }
                for s in m.stages
            ],
        }
        out["warnings"] = [w.as_dict() for w in self.warnings]
        out["notes"] = list(self.notes)
        if m.splits is not None:
            out["splits"] = dict(m.splits.samples)
        if self.overhead is not None:
            o = self.overhead
            out["overhead"] = {
                "on_disk": o.on_disk,
                "fields": o.payload,
                "ratio": round(o.ratio, 3),
                "advice": o.advice,
            }
        return out
