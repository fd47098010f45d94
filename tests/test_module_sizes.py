"""The shape docs/contributing.md asks of every module of the package: small, and named by a
one-line docstring."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "datapipe"
MAX_LINES = 400  # past this, a module holds more than one job: split it by job
MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PACKAGE.parent)) for p in MODULES])
def test_module_is_small_and_says_what_it_is(path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"{path}: over {MAX_LINES} lines; split it by job"
    docstring = ast.get_docstring(ast.parse(text))
    assert docstring, f"{path}: no module docstring"
