"""Re-hash a version's files against its manifest and list what is missing, extra or changed."""

from __future__ import annotations

from dataclasses import dataclass

from datapipe.storage.fs import sha256_of
from datapipe.versioning.layout import BUILD_STATE_NAME, VERSIONS
from datapipe.versioning.manifest import MANIFEST_NAME, Manifest
from datapipe.versioning.store import Store


@dataclass(frozen=True)
class Problem:
    """One file that does not match the manifest: kind is 'missing', 'extra' or 'mismatch'."""

    kind: str
    path: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}" + (f" ({self.detail})" if self.detail else "")


def verify_version(
    store: Store, name: str, manifest: Manifest, version: str | None = None
) -> list[Problem]:
    """Every problem with the files of ``manifest``'s version; empty when all match.

    ``version`` is the directory the manifest was read from (default: the id it names). The manifest
    itself must hash to that id, so an edited manifest is a problem too, as is a missing quarantine
    file.
    """
    version = version or manifest.version
    root = store.path(name, VERSIONS, version)
    problems = _manifest_problems(manifest, version, f"{root}/{MANIFEST_NAME}")
    for directory, files in _expected_files(store, name, manifest, version).items():
        problems += _directory_problems(store, directory, files, manifest, own=directory == root)
    return problems


def _manifest_problems(manifest: Manifest, version: str, where: str) -> list[Problem]:
    """Whether the manifest names and hashes to ``version``, the directory it lies in."""
    problems = []
    if manifest.version != version:
        problems.append(
            Problem("mismatch", where, f"names version {manifest.version}, but lies in {version}")
        )
    content_id = manifest.content_id()
    if content_id != version:
        problems.append(
            Problem(
                "mismatch",
                where,
                f"its content hashes to {content_id}, not to the version id {version}; "
                "the manifest was edited",
            )
        )
    return problems


def _expected_files(
    store: Store, name: str, manifest: Manifest, version: str
) -> dict[str, dict[str, tuple[int, str] | None]]:
    """Directory -> file -> (bytes, sha256) of every file the version lists, its own directory
    first; None for the quarantine file, which has no recorded hash (it must exist)."""
    root = store.path(name, VERSIONS, version)
    expected: dict[str, dict[str, tuple[int, str] | None]] = {root: {}}
    for shard in manifest.shards:
        files = expected.setdefault(store.shard_dir(name, version, shard), {})
        stored, index = shard.stored_names()
        files[stored] = (shard.bytes, shard.sha256)
        files[index] = (shard.index_bytes, shard.index_sha256)
        for companion, filename in shard.companion_names():
            files[filename] = (companion.bytes, companion.sha256)
    if manifest.rejected:
        expected[root][manifest.rejected] = None
    tokenizer = manifest.lineage.tokenizer
    if tokenizer is not None:
        expected[root][tokenizer.file] = (tokenizer.bytes, tokenizer.sha256)
    return expected


def _directory_problems(
    store: Store,
    directory: str,
    files: dict[str, tuple[int, str] | None],
    manifest: Manifest,
    own: bool,
) -> list[Problem]:
    """The files of one directory against what the manifest records of them; in the version's
    ``own`` directory, files it does not list too (a directory shared from holds other
    versions')."""
    fs, problems = store.fs, []
    try:
        found = store.remote(directory, lambda: fs.find(directory, detail=True))
    except FileNotFoundError:
        found = {}
    present = {p.rsplit("/", 1)[-1]: info["size"] for p, info in found.items()}
    for filename, recorded in sorted(files.items()):
        where = f"{directory}/{filename}"
        if filename not in present:
            detail = (
                f"the manifest records {manifest.rejected_rows} rejected rows in it"
                if recorded is None
                else ("" if own else "shared from another version's directory")
            )
            problems.append(Problem("missing", where, detail))
        elif recorded is None:
            continue
        elif present[filename] != recorded[0]:
            problems.append(
                Problem("mismatch", where, f"{present[filename]} bytes, expected {recorded[0]}")
            )
        elif sha256_of(fs, where) != recorded[1]:
            problems.append(Problem("mismatch", where, "sha256 differs"))
    if own:
        for filename in sorted(set(present) - set(files) - {MANIFEST_NAME, BUILD_STATE_NAME}):
            problems.append(Problem("extra", f"{directory}/{filename}"))
    return problems
