"""The machine a benchmark ran on, as every results file records it."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def machine() -> dict:
    """The machine, the tools' versions (datapipe's from the code run), the load and the commit."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in open("/proc/cpuinfo")
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    ram = (
        next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
        / 2**20
    )
    versions = {}
    for dist in (
        "datapipe",
        "torch",
        "numpy",
        "webdataset",
        "mosaicml-streaming",
        "litdata",
        "dask",
        "pyarrow",
        "tokenizers",
        "datatrove",
    ):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "missing"
    import datapipe

    versions["datapipe"] = datapipe.__version__  # an editable install's metadata can be stale
    return {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": ram,
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": versions["torch"],
        "versions": versions,
        "load_before": load_average(),
        "git": git_commit(),
    }


def git_commit() -> str:
    """The commit the run measured, '+dirty' when datapipe/ has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "datapipe"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def load_average() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
