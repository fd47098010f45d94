import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers.cli import datapipe_installed


def datapipe_cli(
    *args: str, cwd: Path, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """The installed command, which must not print a traceback."""
    out = datapipe_installed(*args, cwd=cwd, env=env, timeout=timeout)
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    return out


def last_json(out: subprocess.CompletedProcess) -> dict:
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def digits_project(tmp_path, copy_digits) -> Path:
    """A copy of the digits example with its raw data."""
    return copy_digits(tmp_path, "digits.yaml", "digits_tfrecord.yaml", "digits_code.py")


def leftovers(store: Path) -> list[str]:
    """Partial versions, version directories without a manifest and temporary files anywhere in a
    store."""
    found = {
        str(p.relative_to(store))
        for p in store.rglob("*")
        if p.name.startswith(".partial-") or ".tmp" in p.name
    }
    found |= {
        str(p.relative_to(store))
        for p in store.glob("*/versions/*")
        if p.is_dir() and not p.name.startswith(".") and not (p / "manifest.json").exists()
    }
    return sorted(found)


def crash_moments(default: int) -> int:
    """How many kill moments a crash sweep tries: DATAPIPE_CRASH_MOMENTS, else ``default``."""
    return int(os.environ.get("DATAPIPE_CRASH_MOMENTS", default))
