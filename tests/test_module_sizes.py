"""The shape docs/contributing.md asks of every module of the package: small modules named by a
docstring, and functions that fit on a screen."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "datapipe"
MAX_LINES = 400  # past this, a module holds more than one job: split it by job
MAX_FUNCTION_LINES = 60  # past this, a function does two things: make it two functions
MODULES = sorted(PACKAGE.rglob("*.py"))
IDS = [str(p.relative_to(PACKAGE.parent)) for p in MODULES]


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_module_is_small_and_says_what_it_is(path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"{path}: over {MAX_LINES} lines; split it by job"
    docstring = ast.get_docstring(ast.parse(text))
    assert docstring, f"{path}: no module docstring"


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_every_function_fits_on_a_screen(path):
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    long = [
        f"{node.name} (line {node.lineno}, {node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, functions) and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{path}: over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"


def test_a_long_function_is_found(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    path = tmp_path / "long.py"
    path.write_text(f'"""A module."""\n\n\ndef f():\n{body}\n')
    with pytest.raises(AssertionError, match=r"f \(line 4, 61 lines\)"):
        test_every_function_fits_on_a_screen(path)
