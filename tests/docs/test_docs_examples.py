"""Every command and API in the docs works as documented: the README's and the docs pages' code
blocks, run.

Each page runs in a temporary copy of the repository's layout: `pipelines/` with the digits example
and its prepared raw data (and the text example's files, unprepared), `storage/digits` already
built (the README's command 1), inside a git repository. Its blocks run as helpers/doc_pages.py
says. A page whose run a test of its subject checks step by step is run there, not here (RUN_BY
names the test).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.doc_pages import REPO, PageRun, datapipe, page_blocks

PAGES = [
    "README.md",
    *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*.md")),
]
RUN = {"sh", "python"}
SHOWN = {"yaml", "text", "markdown"}  # yaml blocks that are pipeline files are validated, not run
MAX_NOT_RUN = 10
# pages whose steps a test runs with its own checks between them, and that test
RUN_BY = {"docs/guide/dvc.md": "tests/versioning/test_dvc.py"}


@pytest.fixture(scope="module")
def built_digits(tmp_path_factory, copy_digits, dask_client) -> Path:
    """storage/digits as the README's command 1 leaves it, built once for every page."""
    root = copy_digits(
        tmp_path_factory.mktemp("docs-digits") / "pipelines", "digits.yaml", "digits_code.py"
    ).parent
    result = datapipe(
        ["build", "pipelines/digits.yaml", "--scheduler", dask_client.scheduler.address], root, {}
    )
    assert result.exit_code == 0, result.output
    return root / "storage"


@pytest.fixture
def repo(tmp_path, copy_digits, built_digits, monkeypatch) -> Path:
    """A directory laid out like the repository root, as the current directory."""
    root = tmp_path / "repo"
    # and the text example's pipeline and input writer, for the pages on token versions
    copy_digits(
        root / "pipelines",
        "digits.yaml",
        "digits_code.py",
        "digits_tfrecord.yaml",
        "text.yaml",
        "prepare_text.py",
    )
    shutil.copytree(built_digits, root / "storage")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    monkeypatch.chdir(root)
    return root


@pytest.mark.parametrize(
    "page",
    [
        p
        for p in PAGES
        if p not in RUN_BY
        and any(b.info in RUN | {"yaml"} and b.not_run is None for b in page_blocks(p))
    ],
)
def test_examples_run_as_documented(page, repo, dask_client):
    PageRun(page, repo, dask_client.scheduler.address).run_rest()


def test_the_pages_run_elsewhere_are_run_there_whole():
    """A page in RUN_BY is left out above only because its test runs every step of it
    (PageRun.run_rest)."""
    for page, test in RUN_BY.items():
        source = (REPO / test).read_text()
        assert f'PageRun("{page}"' in source and ".run_rest()" in source, (page, test)


def test_every_block_says_what_it_is_and_few_are_not_run():
    """A block without a known language would silently not run; a not-run mark needs its reason."""
    every = [b for page in PAGES for b in page_blocks(page)]
    unknown = [f"{b.where}: ```{b.info}" for b in every if b.info not in RUN | SHOWN]
    assert not unknown, (
        "code blocks need one of the languages "
        + ", ".join(sorted(RUN | SHOWN))
        + ":\n"
        + "\n".join(unknown)
    )
    not_run = [b for b in every if b.not_run is not None]
    assert all(b.not_run for b in not_run), [b.where for b in not_run if not b.not_run]
    assert len(not_run) <= MAX_NOT_RUN, "keep the blocks that are not run few:\n" + "\n".join(
        f"{b.where}: {b.not_run}" for b in not_run
    )


def test_readme_is_a_short_front_door_with_the_two_commands_first():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    first = page_blocks("README.md")[0].text
    assert (
        ".venv/bin/pip install -e '.[examples]' && .venv/bin/python pipelines/prepare_digits.py && "
        ".venv/bin/datapipe build pipelines/digits.yaml" in first
    )
    assert ".venv/bin/pip install -e '.[dev]' && .venv/bin/python -m pytest -q" in first
    # mkdocs checks the site's links; the README's point into the repository
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    missing = [t for t in targets if "://" not in t and not (REPO / t).exists()]
    assert targets and not missing, missing
