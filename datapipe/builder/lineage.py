"""Lineage of a build: source files with their hashes, the user code a pipeline calls, tool
versions."""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Sequence
from importlib import metadata
from typing import Any

from datapipe import __version__
from datapipe.builder.config import LoadedPipeline, Pipeline
from datapipe.builder.source.base import InputFile
from datapipe.builder.user_code import find_module, load_function
from datapipe.errors import ConfigError
from datapipe.storage.fs import sha256_of
from datapipe.versioning.manifest import CodeRef, SourceFile


def hash_source(fs: Any, f: InputFile) -> SourceFile:
    """Size and content hash of a source file: its etag on object stores, else its sha256."""
    return SourceFile(
        f.label, f.size, f"etag:{f.etag}" if f.etag else f"sha256:{sha256_of(fs, f.path)}"
    )


def hash_sources(fs: Any, files: Sequence[InputFile]) -> list[SourceFile]:
    """``hash_source`` of each of ``files`` (a worker task: one per group of files, not per file,
    since a folder of images has tens of thousands and each task costs the scheduler about a
    millisecond)."""
    return [hash_source(fs, f) for f in files]


def _map_stages(pipeline: Pipeline) -> list[tuple[str, str]]:
    """(YAML key, 'module:function') of every map stage."""
    return [
        (f"stages[{i}].map", stage.args)
        for i, stage in enumerate(pipeline.stages)
        if stage.kind == "map"
    ]


def code_files(pipeline: Pipeline, base_dir: str) -> dict[str, str]:
    """module -> file of every module that a map stage calls."""
    files = {}
    for key, spec in _map_stages(pipeline):
        module = spec.partition(":")[0]
        files[module] = find_module(module, base_dir, key)
    return dict(sorted(files.items()))


def _hashed(files: dict[str, str]) -> tuple[CodeRef, ...]:
    """A CodeRef of each module file, with its sha256."""
    refs = []
    for module, path in sorted(files.items()):
        with open(path, "rb") as f:
            refs.append(CodeRef(module, hashlib.sha256(f.read()).hexdigest()))
    return tuple(refs)


def code_refs(pipeline: Pipeline, base_dir: str) -> tuple[CodeRef, ...]:
    """Every module a map stage calls, with the sha256 of its file."""
    return _hashed(code_files(pipeline, base_dir))


def checked_code(loaded: LoadedPipeline) -> tuple[CodeRef, ...]:
    """``code_refs`` after importing every map stage's function here, before any cluster starts, so
    a missing module or function, or a module that fails on import, is an error naming the stage and
    its line. Every module is found before any is imported: a missing one fails the build before
    any module's top-level code has run."""

    def named(e: ConfigError, key: str) -> ConfigError:
        return ConfigError(f"{loaded.where(key)}: {key}: {str(e).removeprefix(key + ': ')}")

    maps, files = _map_stages(loaded.pipeline), {}
    for key, spec in maps:
        module = spec.partition(":")[0]
        try:
            files[module] = find_module(module, loaded.base_dir, key)
        except ConfigError as e:
            raise named(e, key) from None
    refs = _hashed(files)
    hashes = {ref.module: ref.sha256 for ref in refs}
    for key, spec in maps:
        try:
            load_function(spec, loaded.base_dir, hashes[spec.partition(":")[0]])
        except ConfigError as e:
            raise named(e, key) from None
    return refs


def environment() -> dict[str, str]:
    """Versions of the tools that made the bytes (kept out of the version id)."""
    # datapipe's own version from the code that runs: an editable install's record can be stale
    env = {"python": platform.python_version(), "datapipe": __version__}
    for package in ("dask", "distributed", "pandas", "pyarrow", "numpy"):
        try:
            env[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            env[package] = "not installed"
    return env


HASH_GROUP_BYTES, HASH_GROUP_FILES = 256 << 20, 512  # source files hashed by one task, at most


def hash_tasks(fs: Any, files: Sequence[Any]) -> list[Any]:
    """Tasks hashing the source files, a group of files each (``lineage.hash_sources``)."""
    from dask import delayed

    groups: list[list[Any]] = [[]]
    size = 0
    for f in files:
        if groups[-1] and (size + f.size > HASH_GROUP_BYTES or len(groups[-1]) >= HASH_GROUP_FILES):
            groups.append([])
            size = 0
        groups[-1].append(f)
        size += f.size
    return [delayed(hash_sources, pure=False)(fs, group) for group in groups if group]
