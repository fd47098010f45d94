"""The user's map modules: found in the pipeline file's directory first, imported once per file
hash."""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from datapipe.errors import ConfigError

_FUNCTIONS: dict[tuple[str, str, str | None], Callable[..., Any]] = {}
_IMPORTING = threading.Lock()


def _pipeline_dir_first(base_dir: str) -> None:
    """Put the pipeline file's directory first on sys.path, as every worker does before it imports a
    map module."""
    if base_dir in sys.path:
        sys.path.remove(base_dir)
    sys.path.insert(0, base_dir)


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


def find_module(module: str, base_dir: str, where: str) -> str:
    """The file of map module ``module``: under ``base_dir`` first, else on the Python path;
    ConfigError naming ``where`` when there is none. Nothing is imported but the parents of a dotted
    name."""
    _pipeline_dir_first(base_dir)
    try:
        # not find_spec alone, which answers with the file of an already imported module of that
        # name (another project's, in a long-lived process)
        spec = _spec_in(module, base_dir) or importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        raise ConfigError(f"{where}: cannot find module {module!r} ({e})") from None
    if spec is None or not spec.origin or not spec.has_location:
        raise ConfigError(
            f"{where}: cannot find module {module!r} (looked in {base_dir} and the Python path)"
        )
    return spec.origin


def _file_sha256(module: Any) -> str | None:
    path = getattr(module, "__file__", None)
    if not path:
        return None
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _stale(module: Any, local: Any, sha256: str | None) -> bool:
    """Whether an imported module is not the file this pipeline means (``local``: the spec found in
    the pipeline's directory, or None): one of another directory (a long-lived worker's earlier
    build), one whose file changed, or one whose file is gone."""
    imported = getattr(module, "__file__", None)
    if local is not None and (
        imported is None or os.path.abspath(local.origin) != os.path.abspath(imported)
    ):
        return True
    try:
        return sha256 is not None and _file_sha256(module) != sha256
    except OSError:
        return True


def _forget(module_name: str, whole_package: bool) -> None:
    """Drop the imported module and its submodules, and with ``whole_package`` its top-level package
    too (the pipeline's own: an older import's parents would lead the next import back to their
    directory)."""
    top = module_name.split(".")[0] if whole_package else module_name
    for loaded in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        del sys.modules[loaded]
    importlib.invalidate_caches()


def load_function(spec: str, base_dir: str, sha256: str | None = None) -> Callable[..., Any]:
    """Import 'module.path:function', looking in the pipeline file's directory first.

    ``sha256`` is the hash of the module file the build recorded in its lineage: a long-lived
    worker that imported an older file (or a same-named module of another pipeline) imports
    it afresh rather than run stale code.
    """
    cached = _FUNCTIONS.get((spec, base_dir, sha256))
    if cached is not None:
        return cached
    # an in-process build's tasks run on threads, and imports change sys.path and sys.modules
    with _IMPORTING:
        return _load(spec, base_dir, sha256)


def _load(spec: str, base_dir: str, sha256: str | None) -> Callable[..., Any]:
    cached = _FUNCTIONS.get((spec, base_dir, sha256))
    if cached is not None:  # another thread loaded it while this one waited
        return cached
    module_name, _, name = spec.partition(":")
    _pipeline_dir_first(base_dir)
    try:
        module = importlib.import_module(module_name)
        local = _spec_in(module_name, base_dir)
        if _stale(module, local, sha256):
            _forget(module_name, whole_package=local is not None)
            module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(
            f"map {spec!r}: cannot import module {module_name!r} ({e}); it is looked up in "
            f"{base_dir} and on the Python path"
        ) from None
    except SyntaxError as e:
        where = f"{e.filename}:{e.lineno}" if e.filename else module_name
        raise ConfigError(
            f"map {spec!r}: module {module_name!r} has a syntax error ({where}: "
            f"{e.msg}); fix the module"
        ) from None
    # the module's top-level code failed: the user's bug, reported without a traceback
    except Exception as e:
        raise ConfigError(
            f"map {spec!r}: importing module {module_name!r} failed ({type(e).__name__}: {e}); "
            "fix the module's top-level code"
        ) from None
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(
            k
            for k, v in vars(module).items()
            if callable(v)
            and not k.startswith("_")
            and getattr(v, "__module__", None) == module.__name__
        )
        raise ConfigError(
            f"map {spec!r}: module {module_name!r} has no function {name!r}"
            + (f" (it has: {', '.join(found)})" if found else "")
        )
    _FUNCTIONS[(spec, base_dir, sha256)] = fn
    return fn
