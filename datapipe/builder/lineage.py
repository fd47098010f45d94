"""Lineage of a build: source files with their hashes, the user code a pipeline calls, tool versions."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import platform
import sys
from importlib import metadata
from typing import Any

from datapipe.builder.config import LoadedPipeline, Pipeline
from datapipe.builder.sources import InputFile
from datapipe.errors import ConfigError
from datapipe.storage.fs import sha256_of
from datapipe.versioning.manifest import CodeRef, SourceFile


def hash_source(fs: Any, f: InputFile) -> SourceFile:
    """Size and content hash of a source file: its etag on object stores, else its sha256 (a worker task)."""
    return SourceFile(f.label, f.size, f"etag:{f.etag}" if f.etag else f"sha256:{sha256_of(fs, f.path)}")


def _spec_in(module: str, directory: str) -> Any:
    """The spec of ``module`` (dotted names too) found under ``directory`` only, or None."""
    path, spec = [directory], None
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:depth]), path)
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    return spec


def _module_file(module: str, base_dir: str, where: str) -> str:
    if base_dir not in sys.path:
        sys.path.insert(0, base_dir)
    try:
        # the pipeline's own directory first, as the workers import it; not find_spec alone, which answers
        # with the file of an already imported module of that name (another project's, in a long-lived process)
        spec = _spec_in(module, base_dir) or importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        raise ConfigError(f"{where}: cannot find module {module!r} ({e})") from None
    if spec is None or not spec.origin or not spec.has_location:
        raise ConfigError(f"{where}: cannot find module {module!r} (looked in {base_dir} and the Python path)")
    return spec.origin


def code_files(pipeline: Pipeline, base_dir: str) -> dict[str, str]:
    """module -> file of every module that a map stage calls."""
    files = {}
    for i, stage in enumerate(pipeline.stages):
        if stage.kind == "map":
            module = stage.args.partition(":")[0]
            files[module] = _module_file(module, base_dir, f"stages[{i}].map")
    return dict(sorted(files.items()))


def code_refs(pipeline: Pipeline, base_dir: str) -> tuple[CodeRef, ...]:
    """Every module a map stage calls, with the sha256 of its file."""
    refs = []
    for module, path in code_files(pipeline, base_dir).items():
        with open(path, "rb") as f:
            refs.append(CodeRef(module, hashlib.sha256(f.read()).hexdigest()))
    return tuple(refs)


def checked_code(loaded: LoadedPipeline) -> tuple[CodeRef, ...]:
    """``code_refs`` after importing every map stage's function here, before any cluster starts, so a
    missing module or function, or a module that fails on import, is an error naming the stage and its line."""
    from datapipe.builder.stages import load_function

    def named(e: ConfigError, key: str) -> ConfigError:
        return ConfigError(f"{loaded.where(key)}: {key}: {str(e).removeprefix(key + ': ')}")

    maps = [(f"stages[{i}].map", stage.args) for i, stage in enumerate(loaded.pipeline.stages) if stage.kind == "map"]
    for key, spec in maps:
        try:
            _module_file(spec.partition(":")[0], loaded.base_dir, key)
        except ConfigError as e:
            raise named(e, key) from None
    refs = code_refs(loaded.pipeline, loaded.base_dir)
    hashes = {ref.module: ref.sha256 for ref in refs}
    for key, spec in maps:
        try:
            load_function(spec, loaded.base_dir, hashes[spec.partition(":")[0]])
        except ConfigError as e:
            raise named(e, key) from None
    return refs


def environment() -> dict[str, str]:
    """Versions of the tools that made the bytes (kept out of the version id)."""
    env = {"python": platform.python_version()}
    for package in ("datapipe", "dask", "distributed", "pandas", "pyarrow", "numpy"):
        try:
            env[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            env[package] = "not installed"
    return env
