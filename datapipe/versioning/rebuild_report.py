"""The report of `datapipe check`: why a rebuild's manifest differs from the recorded one.

It names the shards, fields, counts, samples and lineage inputs that changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from datapipe.formats.base import KEY
from datapipe.formats.registry import get_format
from datapipe.formats.shards import read_shard_from
from datapipe.versioning.manifest import Manifest, short_id
from datapipe.versioning.manifest_parts import TokenizerRef
from datapipe.versioning.sample_diff import sample_locations
from datapipe.versioning.store import Store

SAMPLES_SHOWN = 10  # changed samples described field by field; the rest are counted


def _changed_keys(a: dict[str, Any], b: dict[str, Any], prefix: str) -> list[str]:
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
                out.extend(_changed_keys(a[key], b[key], f"{prefix}{key}."))
            else:
                out.append(f"{prefix}{key}")
    return out


def lineage_changes(recorded: Manifest, rebuilt: Manifest) -> list[str]:
    """The inputs that differ: pipeline keys, source files, user code, seed, tokenizer."""
    a, b = recorded.lineage, rebuilt.lineage
    changes = [f"pipeline config: {key}" for key in _changed_keys(a.pipeline, b.pipeline, "")]
    old = {s.path: s for s in a.sources}
    new = {s.path: s for s in b.sources}
    changes += [f"source removed: {p}" for p in sorted(set(old) - set(new))]
    changes += [f"source added: {p}" for p in sorted(set(new) - set(old))]
    changes += [
        f"source changed: {p} ({old[p].hash} -> {new[p].hash})"
        for p in sorted(set(old) & set(new))
        if old[p] != new[p]
    ]
    old_code = {c.module: c.sha256 for c in a.code}
    new_code = {c.module: c.sha256 for c in b.code}
    changes += [
        f"code changed: {m}"
        for m in sorted(set(old_code) | set(new_code))
        if old_code.get(m) != new_code.get(m)
    ]
    if a.seed != b.seed:
        changes.append(f"seed: {a.seed} -> {b.seed}")
    return changes + tokenizer_changes(a.tokenizer, b.tokenizer)


def tokenizer_changes(old: TokenizerRef | None, new: TokenizerRef | None) -> list[str]:
    """The tokenize stage's inputs that differ: its file (by sha256) and the tokenizers library."""
    if old is None and new is None:
        return []
    if old is None or new is None:
        return [
            f"tokenizer: {'none' if old is None else 'used'} -> {'none' if new is None else 'used'}"
        ]
    changes = []
    if old.sha256 != new.sha256:
        changes.append(
            f"tokenizer file changed: sha256 {short_id(old.sha256)} -> {short_id(new.sha256)} "
            "(the token ids differ; decode each version with its own tokenizer.json)"
        )
    if old.library != new.library:
        changes.append(f"tokenizers library: {old.library} -> {new.library}")
    return changes


def manifest_differences(recorded: Manifest, rebuilt: Manifest) -> list[str]:
    """Human lines naming every shard, field, count and lineage input that differs (empty: same
    content)."""
    lines = []
    if recorded.format_version != rebuilt.format_version:
        lines.append(
            f"manifest format {recorded.format_version} -> "
            f"{rebuilt.format_version}: this datapipe cuts "
            "shards by content (format 2), the recorded version was cut by size; "
            "rebuild with the datapipe "
            "that built it to check it byte for byte"
        )
    if recorded.shard_format != rebuilt.shard_format:
        lines.append(f"shard format: {recorded.shard_format} -> {rebuilt.shard_format}")
    for name in sorted(set(recorded.fields) | set(rebuilt.fields)):
        if recorded.fields.get(name) != rebuilt.fields.get(name):
            lines.append(f"field {name}: {recorded.fields.get(name)} -> {rebuilt.fields.get(name)}")
    old = {s.path: s for s in recorded.shards}
    new = {s.path: s for s in rebuilt.shards}
    for path in sorted(set(old) | set(new)):
        if path not in new:
            lines.append(f"shard {path}: only in the recorded version")
        elif path not in old:
            lines.append(f"shard {path}: only in the rebuild")
        elif old[path].sha256 != new[path].sha256:
            lines.append(
                f"shard {path}: content differs ({old[path].samples} -> "
                f"{new[path].samples} samples, "
                f"sha256 {short_id(old[path].sha256)} -> {short_id(new[path].sha256)})"
            )
    if recorded.stages != rebuilt.stages:
        lines.append(
            "stage counts differ: "
            + ", ".join(
                f"{s.stage} out {s.rows_out}" for s in rebuilt.stages if s not in recorded.stages
            )
        )
    lines += [f"lineage: {c}" for c in lineage_changes(recorded, rebuilt)]
    return lines


def _plain(value: Any) -> Any:
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, np.ndarray):
        return (str(value.dtype), value.tolist())
    return value


def _show(value: Any) -> str:
    if isinstance(value, bytes):
        if len(value) <= 24 and value.isascii() and value.decode().isprintable():
            return repr(value.decode())
        return f"{len(value)} bytes"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def field_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """'name: old -> new' for every field of one sample that differs between two versions."""
    out = []
    for name in sorted((set(old) | set(new)) - {KEY}):
        if name not in new:
            out.append(f"{name} only in the recorded version")
        elif name not in old:
            out.append(f"{name} only in the rebuild")
        else:
            a, b = _plain(old[name]), _plain(new[name])
            if a != b:
                out.append(f"{name} {_show(a)} -> {_show(b)}")
    return out


class _Samples:
    """Samples of one version read by (shard, position), one shard's bytes held at a time."""

    def __init__(self, store: Store, name: str, manifest: Manifest) -> None:
        self.store, self.name, self.manifest = store, name, manifest
        self.fmt = get_format(manifest.shard_format)
        self.shards = {s.path: s for s in manifest.shards}
        self._open: tuple[str, Any] | None = None

    def read(self, shard: str, i: int) -> dict[str, Any]:
        if self._open is None or self._open[0] != shard:
            self.close()
            entry, version = self.shards[shard], self.manifest.version
            reader = read_shard_from(
                self.store.fs,
                self.store.shard_file(self.name, version, entry),
                self.store.shard_file(self.name, version, entry, index=True),
                self.fmt,
            )
            self._open = (shard, reader)
        return dict(self._open[1][i])

    def close(self) -> None:
        if self._open is not None:
            self._open[1].close()
            self._open = None


def sample_differences(
    recorded: tuple[Store, str, Manifest],
    rebuilt: tuple[Store, str, Manifest],
    shown: int = SAMPLES_SHOWN,
) -> list[str]:
    """Lines naming the sample keys that differ between two versions and, for the first ``shown``
    changed ones, which fields changed and how (values read back from both versions' shards)."""
    old, new = sample_locations(*recorded), sample_locations(*rebuilt)
    removed = sorted(old.keys() - new.keys())
    added = sorted(new.keys() - old.keys())
    changed = sorted(k for k in old.keys() & new.keys() if old[k][2] != new[k][2])
    if not (removed or added or changed):
        return []
    lines = [
        f"samples: {len(changed)} changed, {len(removed)} only in the recorded version, "
        f"{len(added)} only in the rebuild"
    ]
    a, b = _Samples(*recorded), _Samples(*rebuilt)
    try:
        # by shard, so that each shard is read once
        for key in sorted(changed[:shown], key=lambda k: (old[k][0], old[k][1])):
            shard_a, i_a, _ = old[key]
            sample_a = a.read(shard_a, i_a)
            shard_b, i_b, _ = new[key]
            fields = field_changes(sample_a, b.read(shard_b, i_b))
            lines.append(
                f"sample {key} ({shard_a}): " + ("; ".join(fields) or "same fields, other encoding")
            )
    finally:
        a.close()
        b.close()
    lines += _listed("only in the recorded version", removed, shown)
    lines += _listed("only in the rebuild", added, shown)
    if len(changed) > shown:
        lines.append(
            f"... and {len(changed) - shown} more changed samples (`datapipe diff` lists them all)"
        )
    return lines


def _listed(where: str, keys: Iterable[str], shown: int) -> list[str]:
    keys = list(keys)
    lines = [f"sample {k}: {where}" for k in keys[:shown]]
    if len(keys) > shown:
        lines.append(f"... and {len(keys) - shown} more samples {where}")
    return lines
