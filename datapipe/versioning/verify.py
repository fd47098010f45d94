"""Re-hash a version's files against its manifest and list what is missing, extra or changed."""

from __future__ import annotations

from dataclasses import dataclass

from datapipe.storage.fs import sha256_of
from datapipe.versioning.manifest import MANIFEST_NAME, Manifest
from datapipe.versioning.store import VERSIONS, Store


@dataclass(frozen=True)
class Problem:
    """One file that does not match the manifest: kind is 'missing', 'extra' or 'mismatch'."""

    kind: str
    path: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}" + (f" ({self.detail})" if self.detail else "")


def verify_version(store: Store, name: str, manifest: Manifest) -> list[Problem]:
    """Every problem with the files of ``manifest``'s version; empty when all match."""
    fs = store.fs
    root = store.path(name, VERSIONS, manifest.version)
    expected: dict[str, tuple[int, str]] = {}
    for shard in manifest.shards:
        expected[shard.path] = (shard.bytes, shard.sha256)
        expected[shard.index_path] = (shard.index_bytes, shard.index_sha256)
    present = {p.rsplit("/", 1)[-1]: info["size"] for p, info in fs.find(root, detail=True).items()}
    problems = []
    for filename, (size, digest) in sorted(expected.items()):
        if filename not in present:
            problems.append(Problem("missing", f"{root}/{filename}"))
        elif present[filename] != size:
            problems.append(Problem("mismatch", f"{root}/{filename}", f"{present[filename]} bytes, expected {size}"))
        elif sha256_of(fs, f"{root}/{filename}") != digest:
            problems.append(Problem("mismatch", f"{root}/{filename}", "sha256 differs"))
    allowed = {MANIFEST_NAME, manifest.rejected}
    for filename in sorted(set(present) - set(expected) - allowed):
        problems.append(Problem("extra", f"{root}/{filename}"))
    return problems
