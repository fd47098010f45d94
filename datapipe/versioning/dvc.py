"""DVC glue: the dvc.yaml stage that rebuilds a dataset when, and only when, one of its inputs
changes."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from datapipe.errors import ConfigError, NotFoundError

DVC_FILE = "dvc.yaml"
DVC_IGNORE = ".dvcignore"
# what a store holds that is not the dataset: readers' leases, a build's partial directory, and the
# build state an incremental build reads (a cache of the last build, rewritten by a rebuild of the
# same version)
TRANSIENT = ("{out}/leases/", "{out}/versions/.partial-*/", "{out}/versions/*/build-state.npz")


def find_repo(start: str | os.PathLike[str]) -> Path:
    """The DVC repository containing ``start``: the nearest directory with a .dvc folder."""
    here = Path(start).resolve()
    for directory in (here, *here.parents):
        if (directory / ".dvc").is_dir():
            return directory
    raise NotFoundError(
        f"{here}: not inside a DVC repository (run `dvc init` at the root of your git repository)"
    )


def relative(path: str, root: Path) -> str:
    """``path`` relative to the repository root (POSIX separators); URLs stay as they are."""
    if "://" in path:
        return path
    rel = os.path.relpath(Path(path).resolve(), root)
    if rel.startswith(".."):
        raise ConfigError(
            f"{path}: outside the DVC repository {root}; DVC can only track paths inside it"
        )
    return Path(rel).as_posix()


def build_stage(cmd: str, deps: Sequence[str], out: str) -> dict[str, Any]:
    """A dvc.yaml stage. The store directory is a persistent output: DVC must not delete the
    older versions in it before a rebuild, and caches it so that push/pull move the dataset."""
    return {"cmd": cmd, "deps": list(dict.fromkeys(deps)), "outs": [{out: {"persist": True}}]}


def update_dvcignore(root: Path, out: str) -> list[str]:
    """Add to ROOT/.dvcignore the transient parts of the dataset folder ``out`` (relative to ROOT):
    a lease that a running Loader holds must not make DVC see a changed output. The patterns it
    added."""
    path = root / DVC_IGNORE
    lines = path.read_text().splitlines() if path.exists() else []
    added = [p.format(out=out) for p in TRANSIENT if p.format(out=out) not in lines]
    if added:
        tmp = path.with_name(f".{DVC_IGNORE}.tmp")
        tmp.write_text("\n".join([*lines, *added]) + "\n")
        os.replace(tmp, path)
    return added


def update_dvc_yaml(root: Path, name: str, stage: dict[str, Any]) -> Path:
    """Add or replace stage ``name`` in ROOT/dvc.yaml, keeping every other stage as it was."""
    path = root / DVC_FILE
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML ({e})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping with a 'stages' key")
    data.setdefault("stages", {})[name] = stage
    tmp = path.with_name(f".{DVC_FILE}.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    os.replace(tmp, path)
    return path
