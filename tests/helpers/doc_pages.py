"""Run a docs page as docs/contributing.md describes: its blocks in page order, `sh` lines one by
one.

`datapipe ...` runs in process through click's CliRunner, builds and checks on the session's Dask
cluster instead of a cluster of their own; any other command runs in bash with the venv first on
PATH (a build it starts, such as `dvc repro`'s, runs in process unless the line sets
DATAPIPE_WORKERS). Each command must exit 0 or the `# exit N` its comment names. `python` blocks
share one namespace per page; `yaml` pipeline files are validated against the schema. Blocks marked
`<!-- not run: why -->` are skipped.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import yaml
from click.testing import CliRunner

from helpers.cli import on_session_cluster
from helpers.markdown_blocks import Block, blocks, split_and, split_comment

REPO = Path(__file__).parents[2]
BIN = Path(sys.executable).parent
EXIT = re.compile(r"^exit (\d+)\b")
# commands that start a Dask cluster of their own unless given --scheduler
BUILDS = {"build", "check"}


def page_blocks(page: str) -> list[Block]:
    """The fenced blocks of ``page`` (a path relative to the repository)."""
    return blocks(REPO / page, page)


@dataclass(frozen=True)
class Step:
    """One thing a page runs: a shell command (one part of an `&&` chain), a python block or a
    pipeline file."""

    kind: str  # "sh", "python" or "yaml"
    text: str
    where: str  # PAGE:LINE
    expected: int = 0  # the exit status the docs give a shell command


def steps(page: str) -> list[Step]:
    """What ``page`` runs, in page order."""
    found = []
    for block in page_blocks(page):
        if block.not_run is not None:
            continue
        if block.info == "sh":
            for offset, line in enumerate(block.text.splitlines(), 1):
                command, comment = split_comment(line)
                documented = EXIT.match(comment)
                chain = split_and(command) if command else []
                for i, part in enumerate(chain):
                    expected = int(documented.group(1)) if documented and i == len(chain) - 1 else 0
                    found.append(Step("sh", part, f"{block.page}:{block.line + offset}", expected))
        elif block.info == "python":
            found.append(Step("python", block.text, block.where))
        elif block.info == "yaml" and block.text.startswith("name:"):
            found.append(Step("yaml", block.text, block.where))
    return found


class PageRun:
    """A page's steps run in ``cwd``, all at once (``run_rest``) or up to a command a test looks at
    after."""

    def __init__(self, page: str, cwd: Path, scheduler: str) -> None:
        self.page, self.cwd, self.scheduler = page, cwd, scheduler
        self.steps = steps(page)
        self.done = 0
        self.namespace: dict = {"__name__": "docs_example"}

    def run_through(self, command: str) -> str:
        """Run the steps up to and including the next shell command ``command``; its output (stdout
        and stderr)."""
        while self.done < len(self.steps):
            step = self.steps[self.done]
            output = self._run(step)
            self.done += 1
            if step.kind == "sh" and step.text == command:
                return output
        raise AssertionError(f"{self.page}: no command `{command}` left to run")

    def run_rest(self) -> None:
        """Run every step not run yet."""
        while self.done < len(self.steps):
            self._run(self.steps[self.done])
            self.done += 1

    def _run(self, step: Step) -> str:
        if step.kind == "python":
            before = os.getcwd()
            os.chdir(self.cwd)
            try:
                exec(compile(step.text, step.where, "exec"), self.namespace)
            finally:
                os.chdir(before)
            return ""
        if step.kind == "yaml":
            schema = json.loads((REPO / "schemas" / "pipeline.schema.json").read_text())
            errors = list(
                jsonschema.Draft202012Validator(schema).iter_errors(yaml.safe_load(step.text))
            )
            assert not errors, (
                f"{step.where}: the pipeline file breaks schemas/pipeline.schema.json: "
                f"{errors[0].message}"
            )
            return ""
        code, output = self._command(step.text)
        assert code == step.expected, (
            f"{step.where}: `{step.text}` exited {code}, the docs say {step.expected}:\n{output}"
        )
        return output

    def _command(self, command: str) -> tuple[int, str]:
        words = shlex.split(command)
        env = {}
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        if words and words[0] == "datapipe":
            result = datapipe(
                _on_cluster(_expand(words[1:], self.cwd), self.scheduler), self.cwd, env
            )
            return result.exit_code, result.output
        full_env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "DVC_NO_ANALYTICS": "1",
            **env,
        }
        done = subprocess.run(
            ["bash", "-c", command], cwd=self.cwd, env=full_env, capture_output=True, text=True
        )
        return done.returncode, done.stdout + done.stderr


def datapipe(args: list[str], cwd: Path, env: dict[str, str]):
    """``datapipe ARGS`` in process, in ``cwd``; click's Result."""
    from datapipe.cli.main import cli

    before = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(
            cli, args, prog_name="datapipe", env=env or None, catch_exceptions=False
        )
    finally:
        os.chdir(before)


def _on_cluster(args: list[str], scheduler: str) -> list[str]:
    """``datapipe build``/``check`` args on the session's cluster (on_session_cluster's options
    added), --workers N dropped."""
    if not args or args[0] not in BUILDS or "--scheduler" in args:
        return args
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--workers":
            skip = True
        elif not arg.startswith("--workers="):
            out.append(arg)
    return [*out, *on_session_cluster(scheduler)]


def _expand(args: list[str], cwd: Path) -> list[str]:
    """Shell globs in arguments, as a shell would expand them (a pattern matching nothing stays as
    it is)."""
    out = []
    for arg in args:
        matches = sorted(glob.glob(arg, root_dir=cwd)) if re.search(r"[*?\[]", arg) else []
        out += matches or [arg]
    return out
