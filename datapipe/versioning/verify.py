"""Re-hash a version's files against its manifest and list what is missing, extra or changed."""

from __future__ import annotations

from dataclasses import dataclass

from datapipe.storage.fs import sha256_of
from datapipe.versioning.manifest import MANIFEST_NAME, Manifest
from datapipe.versioning.store import BUILD_STATE_NAME, VERSIONS, Store


@dataclass(frozen=True)
class Problem:
    """One file that does not match the manifest: kind is 'missing', 'extra' or 'mismatch'."""

    kind: str
    path: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}" + (f" ({self.detail})" if self.detail else "")


def verify_version(store: Store, name: str, manifest: Manifest, version: str | None = None) -> list[Problem]:
    """Every problem with the files of ``manifest``'s version; empty when all match.

    ``version`` is the directory the manifest was read from (default: the id it names). The manifest
    itself must hash to that id, so an edited manifest is a problem too, as is a missing quarantine file.
    """
    fs = store.fs
    version = version or manifest.version
    root = store.path(name, VERSIONS, version)
    problems = []
    if manifest.version != version:
        problems.append(Problem("mismatch", f"{root}/{MANIFEST_NAME}",
                                f"names version {manifest.version}, but lies in {version}"))
    content_id = manifest.content_id()
    if content_id != version:
        problems.append(Problem("mismatch", f"{root}/{MANIFEST_NAME}",
                                f"its content hashes to {content_id}, not to the version id {version}; "
                                "the manifest was edited"))
    expected: dict[str, tuple[int, str] | None] = {}
    for shard in manifest.shards:
        expected[shard.path] = (shard.bytes, shard.sha256)
        expected[shard.index_path] = (shard.index_bytes, shard.index_sha256)
    if manifest.rejected:
        expected[manifest.rejected] = None  # no recorded hash: it must exist
    found = store.remote(root, lambda: fs.find(root, detail=True))
    present = {p.rsplit("/", 1)[-1]: info["size"] for p, info in found.items()}
    for filename, recorded in sorted(expected.items()):
        if filename not in present:
            detail = f"the manifest records {manifest.rejected_rows} rejected rows in it" if recorded is None else ""
            problems.append(Problem("missing", f"{root}/{filename}", detail))
        elif recorded is None:
            continue
        elif present[filename] != recorded[0]:
            problems.append(Problem("mismatch", f"{root}/{filename}",
                                    f"{present[filename]} bytes, expected {recorded[0]}"))
        elif sha256_of(fs, f"{root}/{filename}") != recorded[1]:
            problems.append(Problem("mismatch", f"{root}/{filename}", "sha256 differs"))
    for filename in sorted(set(present) - set(expected) - {MANIFEST_NAME, BUILD_STATE_NAME}):
        problems.append(Problem("extra", f"{root}/{filename}"))
    return problems
