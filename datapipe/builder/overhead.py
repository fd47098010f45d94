"""A version's shards on disk against the field bytes they hold, and what to choose when the
format's own bytes dominate."""

from __future__ import annotations

from datapipe.builder.measure import Measure
from datapipe.builder.result import Overhead
from datapipe.formats.registry import get_format
from datapipe.versioning.manifest import Manifest

# past this many bytes on disk per byte of fields, the summary says what to choose instead
ADVISE_ABOVE = 3.0


def overhead(measured: Measure, manifest: Manifest, format_name: str) -> Overhead | None:
    """What ``manifest``'s shards hold (the field bytes of the samples ``measured`` kept) against
    their size on disk; None when a reused partition's report has no field bytes."""
    if any(m.payloads is None for m in measured.reports):
        return None
    kept = zip(measured.reports, measured.key_keep, strict=True)
    payload = sum(int(m.payloads[keep].sum()) for m, keep in kept)
    on_disk = sum(e.bytes for e in manifest.shards)
    return Overhead(on_disk, payload, _advice(format_name, on_disk, payload))


def _advice(format_name: str, on_disk: int, payload: int) -> str | None:
    """What to choose instead, when the format takes more than ``ADVISE_ABOVE`` times the
    fields."""
    if not payload or on_disk <= ADVISE_ABOVE * payload:
        return None
    ratio = on_disk / payload
    if get_format(format_name).name == "webdataset":
        return (
            f"the shards take {ratio:.1f}x their fields' bytes: WebDataset tar spends a 512-byte "
            "header and padding to 512 bytes on every field of every sample. For small tabular "
            "rows choose shards.format: tfrecord, or fewer, larger fields (sample.fields: "
            "{json: [col1, col2, ...]} puts columns in one field)"
        )
    return (
        f"the shards take {ratio:.1f}x their fields' bytes: the fields are small against the "
        "format's framing per sample and field; fewer, larger fields (sample.fields: "
        "{json: [col1, col2, ...]}) hold the same rows in less space"
    )
