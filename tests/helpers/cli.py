"""The two ways tests run `datapipe`: in this process through click's CliRunner (the default), or as
the installed command in a subprocess (for the tests about the command line itself, one smoke test
per command, and the tests whose point is a process: kills, terminals, concurrent builders, DVC).

In process a command runs the same code, with the same exit codes and output, without an interpreter
start; a build given ``--scheduler`` of the session's Dask cluster (the ``scheduler`` fixture)
starts no cluster either.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from click.testing import CliRunner

# the console script pip installed beside this interpreter (`datapipe` as a user runs it)
INSTALLED = Path(sys.executable).with_name("datapipe")


@contextlib.contextmanager
def _fresh_logging() -> Iterator[None]:
    """The root logger as a new process has it (no handlers), so the command's logging.basicConfig
    takes effect and its log lines reach the captured stderr; pytest's handlers and level come back
    afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    for handler in handlers:
        root.removeHandler(handler)
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
            handler.close()
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)


def _overrides(env: Mapping[str, str] | None) -> dict[str, str | None] | None:
    """``env`` (a whole environment, as subprocess takes it) as CliRunner's changes to os.environ: a
    variable missing from ``env`` is unset for the call."""
    if env is None:
        return None
    return {**{k: None for k in os.environ if k not in env}, **env}


def datapipe_in_process(
    *args: str, cwd: Path | str | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``datapipe ARGS`` in this process; the result looks like subprocess.run's (returncode,
    stdout, stderr).

    ``env``: the whole environment of the call, as for subprocess. An exception the command lets out
    (a traceback, for a user) is raised, failing the test that ran it."""
    from datapipe.cli.main import cli

    before = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        with _fresh_logging():
            result = CliRunner().invoke(
                cli, list(args), prog_name="datapipe", catch_exceptions=False, env=_overrides(env)
            )
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(
        ["datapipe", *args], result.exit_code, result.stdout, result.stderr
    )


def datapipe_installed(
    *args: str,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    """Run the installed ``datapipe ARGS`` command in a subprocess and wait for it (text output
    captured)."""
    return subprocess.run(
        [str(INSTALLED), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


def datapipe_process(
    *args: str, cwd: Path | str | None = None, env: Mapping[str, str] | None = None, **popen: object
) -> subprocess.Popen:
    """Start the installed ``datapipe ARGS`` command without waiting (for tests that kill or race
    builds)."""
    return subprocess.Popen([str(INSTALLED), *args], cwd=cwd, env=env, **popen)


# The session's scheduler is known to be up (its fixture started it): the only thing a longer
# timeout than the default 10 s can change is how slow its answer may be. Dask bounds the handshake
# with a reachable scheduler by the same timeout as the retries of a refused connection, and the
# scheduler answers from the test process, which shares 2 cores with builds and DataLoader workers:
# under load an answer can take more than 10 s.
SESSION_SCHEDULER_TIMEOUT = "120"


def on_session_cluster(address: str) -> tuple[str, ...]:
    """The options of `build|check` that run it on the session's Dask cluster at ``address``."""
    return ("--scheduler", address, "--scheduler-timeout", SESSION_SCHEDULER_TIMEOUT)
