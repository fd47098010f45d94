"""The digits example built once per session: where its project and store are, and its build
summary."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class DigitsBuild:
    """The digits project (pipelines/digits*.yaml, digits_code.py, raw/), its store and `build
    --json`'s summary."""

    project: Path
    store: Path
    summary: dict[str, Any]

    @property
    def version(self) -> str:
        """The version id of the build."""
        return self.summary["version"]

    @property
    def url(self) -> str:
        """The dataset URL, STORE/digits."""
        return f"{self.store}/digits"

    def copy(self, directory: Path) -> DigitsBuild:
        """The project and its store copied to ``directory`` (for a test that changes either)."""
        shutil.copytree(
            self.project,
            directory,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        store = directory / self.store.relative_to(self.project)
        return DigitsBuild(
            directory, store, {**self.summary, "url": f"{store}/digits@{self.version}"}
        )
