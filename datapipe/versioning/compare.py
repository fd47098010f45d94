"""Why two manifests of one dataset differ: shards, fields, counts, and the lineage input that changed.

`datapipe check` rebuilds a version and explains a different id with these lines.
"""

from __future__ import annotations

from typing import Any

from datapipe.versioning.manifest import Manifest


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
    """The inputs that differ: pipeline keys, source files, user code, seed."""
    a, b = recorded.lineage, rebuilt.lineage
    changes = [f"pipeline config: {key}" for key in _changed_keys(a.pipeline, b.pipeline, "")]
    old = {s.path: s for s in a.sources}
    new = {s.path: s for s in b.sources}
    changes += [f"source removed: {p}" for p in sorted(set(old) - set(new))]
    changes += [f"source added: {p}" for p in sorted(set(new) - set(old))]
    changes += [f"source changed: {p} ({old[p].hash} -> {new[p].hash})"
                for p in sorted(set(old) & set(new)) if old[p] != new[p]]
    old_code = {c.module: c.sha256 for c in a.code}
    new_code = {c.module: c.sha256 for c in b.code}
    changes += [f"code changed: {m}" for m in sorted(set(old_code) | set(new_code))
                if old_code.get(m) != new_code.get(m)]
    if a.seed != b.seed:
        changes.append(f"seed: {a.seed} -> {b.seed}")
    return changes


def manifest_differences(recorded: Manifest, rebuilt: Manifest) -> list[str]:
    """Human lines naming every shard, field, count and lineage input that differs (empty: same content)."""
    lines = []
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
            lines.append(f"shard {path}: content differs ({old[path].samples} -> {new[path].samples} samples, "
                         f"sha256 {old[path].sha256[:12]} -> {new[path].sha256[:12]})")
    if recorded.stages != rebuilt.stages:
        lines.append("stage counts differ: " + ", ".join(
            f"{s.stage} out {s.rows_out}" for s in rebuilt.stages if s not in recorded.stages))
    lines += [f"lineage: {c}" for c in lineage_changes(recorded, rebuilt)]
    return lines
