"""`datapipe ...` run in the test process through click's CliRunner, for tests whose point is not the command line
itself: the same command code, exit codes and output, without starting an interpreter (and, with ``--scheduler``,
without starting a Dask cluster) for each call. The tests of the command line itself run it as a subprocess."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from click.testing import CliRunner


def datapipe_in_process(*args: str, cwd: Path | str | None = None) -> subprocess.CompletedProcess:
    """Run ``datapipe ARGS`` here; the result looks like subprocess.run's (returncode, stdout, stderr).

    An exception the command lets out (a traceback, for a user) is raised, failing the test that ran it."""
    from datapipe.cli.main import cli

    before = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, list(args), prog_name="datapipe", catch_exceptions=False)
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(["datapipe", *args], result.exit_code, result.stdout, result.stderr)
