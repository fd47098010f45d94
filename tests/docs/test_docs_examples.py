"""Every command and API in the docs works as documented: the README's and the docs pages' code blocks, run.

Each page runs in a temporary copy of the repository's layout: `pipelines/` with the digits example and its
prepared raw data, `storage/digits` already built (the README's command 1), inside a git repository. Its
blocks run in page order, as docs/contributing.md describes: `sh` lines one by one (`datapipe ...` in process
through click's CliRunner, builds and checks on the session's Dask cluster instead of a cluster of their own;
any other command in bash with the venv first on PATH: a build it starts, such as `dvc repro`'s, runs in process
unless the line sets DATAPIPE_WORKERS), each
to exit 0 or the `# exit N` its comment names; `python` blocks in one namespace per page; `yaml` pipeline
files validated against the schema. Blocks marked `<!-- not run: why -->` are skipped.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from markdown_blocks import Block, blocks, split_and, split_comment

REPO = Path(__file__).parents[2]
BIN = Path(sys.executable).parent
PAGES = ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*.md"))]
RUN = {"sh", "python"}
SHOWN = {"yaml", "text", "markdown"}  # yaml blocks that are pipeline files are validated, not run
EXIT = re.compile(r"^exit (\d+)\b")
BUILDS = {"build", "check"}  # commands that start a Dask cluster of their own unless given --scheduler
MAX_NOT_RUN = 10


def page_blocks(page: str) -> list[Block]:
    return blocks(REPO / page, page)


@pytest.fixture(scope="module")
def built_digits(tmp_path_factory, copy_digits, dask_client) -> Path:
    """storage/digits as the README's command 1 leaves it, built once for every page."""
    root = copy_digits(tmp_path_factory.mktemp("docs-digits") / "pipelines", "digits.yaml", "digits_code.py").parent
    result = _datapipe(["build", "pipelines/digits.yaml", "--scheduler", dask_client.scheduler.address], root, {})
    assert result.exit_code == 0, result.output
    return root / "storage"


@pytest.fixture
def repo(tmp_path, copy_digits, built_digits, monkeypatch) -> Path:
    """A directory laid out like the repository root, as the current directory."""
    root = tmp_path / "repo"
    copy_digits(root / "pipelines", "digits.yaml", "digits_code.py", "digits_tfrecord.yaml")
    shutil.copytree(built_digits, root / "storage")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    monkeypatch.chdir(root)
    return root


def _datapipe(args: list[str], cwd: Path, env: dict[str, str]):
    from datapipe.cli.main import cli

    before = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(cli, args, prog_name="datapipe", env=env or None, catch_exceptions=False)
    finally:
        os.chdir(before)


def _on_cluster(args: list[str], scheduler: str) -> list[str]:
    """``datapipe build``/``check`` args on the session's cluster: --scheduler added, --workers N dropped."""
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
    return [*out, "--scheduler", scheduler]


def _expand(args: list[str], cwd: Path) -> list[str]:
    """Shell globs in arguments, as a shell would expand them (a pattern matching nothing stays as it is)."""
    out = []
    for arg in args:
        matches = sorted(glob.glob(arg, root_dir=cwd)) if re.search(r"[*?\[]", arg) else []
        out += matches or [arg]
    return out


def _run_command(command: str, expected: int, where: str, cwd: Path, scheduler: str) -> None:
    words = shlex.split(command)
    env = {}
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if words and words[0] == "datapipe":
        args = _on_cluster(_expand(words[1:], cwd), scheduler)
        result = _datapipe(args, cwd, env)
        code, output = result.exit_code, result.output
    else:
        full_env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1", **env}
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=full_env, capture_output=True, text=True)
        code, output = done.returncode, done.stdout + done.stderr
    assert code == expected, f"{where}: `{command}` exited {code}, the docs say {expected}:\n{output}"


def _run_sh(block: Block, cwd: Path, scheduler: str) -> None:
    for offset, line in enumerate(block.text.splitlines(), 1):
        command, comment = split_comment(line)
        if not command:
            continue
        documented = EXIT.match(comment)
        chain = split_and(command)
        for i, part in enumerate(chain):
            expected = int(documented.group(1)) if documented and i == len(chain) - 1 else 0
            _run_command(part, expected, f"{block.page}:{block.line + offset}", cwd, scheduler)


def _check_pipeline_yaml(block: Block) -> None:
    schema = json.loads((REPO / "schemas" / "pipeline.schema.json").read_text())
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(yaml.safe_load(block.text)))
    assert not errors, f"{block.where}: the pipeline file breaks schemas/pipeline.schema.json: {errors[0].message}"


@pytest.mark.parametrize("page", [p for p in PAGES if any(b.info in RUN | {"yaml"} and b.not_run is None
                                                            for b in page_blocks(p))])
def test_examples_run_as_documented(page, repo, dask_client):
    namespace: dict = {"__name__": "docs_example"}
    for block in page_blocks(page):
        if block.not_run is not None:
            continue
        if block.info == "sh":
            _run_sh(block, repo, dask_client.scheduler.address)
        elif block.info == "python":
            exec(compile(block.text, block.where, "exec"), namespace)
        elif block.info == "yaml" and block.text.startswith("name:"):
            _check_pipeline_yaml(block)


def test_every_block_says_what_it_is_and_few_are_not_run():
    """A block without a known language would silently not run; a not-run mark needs its reason."""
    every = [b for page in PAGES for b in page_blocks(page)]
    unknown = [f"{b.where}: ```{b.info}" for b in every if b.info not in RUN | SHOWN]
    assert not unknown, "code blocks need one of the languages " + ", ".join(sorted(RUN | SHOWN)) + ":\n" + \
        "\n".join(unknown)
    not_run = [b for b in every if b.not_run is not None]
    assert all(b.not_run for b in not_run), [b.where for b in not_run if not b.not_run]
    assert len(not_run) <= MAX_NOT_RUN, "keep the blocks that are not run few:\n" + \
        "\n".join(f"{b.where}: {b.not_run}" for b in not_run)


def test_readme_is_a_short_front_door_with_the_two_commands_first():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    first = page_blocks("README.md")[0].text
    assert ".venv/bin/pip install -e '.[examples]' && .venv/bin/python pipelines/prepare_digits.py && " \
           ".venv/bin/datapipe build pipelines/digits.yaml" in first
    assert ".venv/bin/pip install -e '.[dev]' && .venv/bin/python -m pytest -q" in first
    # mkdocs checks the site's links; the README's point into the repository
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    missing = [t for t in targets if "://" not in t and not (REPO / t).exists()]
    assert targets and not missing, missing
