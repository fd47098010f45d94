"""The mix file: a YAML of sources, weights and epoch_samples, read with errors that name the file
and key.

Local dataset URLs in it are relative to the file's folder, as a pipeline file's source paths are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from datapipe.errors import ConfigError

KEYS = ("sources", "weights", "epoch_samples")


@dataclass(frozen=True)
class MixSpec:
    """What a mix file says."""

    sources: dict[str, Any]  # name -> URL or {dataset: URL, split: NAME}
    weights: dict[str, float] | None
    epoch_samples: int | None


def _resolved(url: Any, base: Path, where: str) -> str:
    if not isinstance(url, str) or not url:
        raise ConfigError(
            f"{where}: a dataset URL (STORE/NAME[@REF]) must be a non-empty string, got {url!r}"
        )
    if "://" in url or os.path.isabs(url):
        return url
    return str(base / url)


def read_mix_file(path: str | os.PathLike[str]) -> MixSpec:
    """Parse a mix file; every mistake is a ConfigError naming the file and the key."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such mix file") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: not a readable YAML mix file ({e})") from None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: a mix file is a mapping with keys {', '.join(KEYS)}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} (a mix file has {', '.join(KEYS)})")
    sources = raw.get("sources")
    if not isinstance(sources, Mapping) or not sources:
        raise ConfigError(
            f"{path}: 'sources' must map each source name to a dataset URL or {{dataset, split}}"
        )
    base = path.parent
    resolved: dict[str, Any] = {}
    for name, spec in sources.items():
        where = f"{path}: sources.{name}"
        if isinstance(spec, Mapping):
            resolved[str(name)] = {
                **spec,
                "dataset": _resolved(spec.get("dataset"), base, f"{where}.dataset"),
            }
        else:
            resolved[str(name)] = _resolved(spec, base, where)
    weights = raw.get("weights")
    if weights is not None and not isinstance(weights, Mapping):
        raise ConfigError(f"{path}: 'weights' must map source names to numbers")
    epoch_samples = raw.get("epoch_samples")
    if epoch_samples is not None and (
        not isinstance(epoch_samples, int) or isinstance(epoch_samples, bool)
    ):
        raise ConfigError(f"{path}: 'epoch_samples' must be a whole number, got {epoch_samples!r}")
    return MixSpec(
        resolved,
        {str(k): v for k, v in weights.items()} if weights is not None else None,
        epoch_samples,
    )
