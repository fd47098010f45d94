"""README's command 1 installs what every step of its tour needs, on a machine without a GPU."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re

from helpers.doc_pages import REPO, page_blocks
from helpers.markdown_blocks import split_and, split_comment
from packaging.requirements import Requirement


def command_one_installs() -> set[str]:
    """The distributions command 1 asks for by name: the package's own and its `examples` extra."""
    names = {"datapipe"}
    for text in md.requires("datapipe") or ():
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": "examples"}):
            names.add(req.name.lower())
    return names


def tour_blocks():
    """The tour's fenced blocks (between README's tour markers)."""
    readme = (REPO / "README.md").read_text()
    start = readme[: readme.index("[start:tour]")].count("\n")
    end = readme[: readme.index("[end:tour]")].count("\n")
    return [b for b in page_blocks("README.md") if start < b.line < end]


def needs(blocks) -> dict[str, str]:
    """What the tour's steps take (distribution -> the step), from its programs, its imports and
    the Loader options that take torch."""
    scripts = {ep.name: ep.dist.name.lower() for ep in md.entry_points(group="console_scripts")}
    modules = {m: dists[0].lower() for m, dists in md.packages_distributions().items()}
    found: dict[str, str] = {}
    for block in blocks:
        if block.info == "sh":
            for line in block.text.splitlines():
                for command in split_and(split_comment(line)[0]):
                    program = command.split()[0] if command.split() else ""
                    if program in scripts:
                        found.setdefault(scripts[program], f"{block.where}: {program}")
        elif block.info == "python":
            for node in ast.walk(ast.parse(block.text)):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                for name in names:
                    top = name.split(".")[0]
                    found.setdefault(modules.get(top, top), f"{block.where}: import {name}")
            if re.search(r"num_workers=[1-9]", block.text):
                found.setdefault("torch", f"{block.where}: num_workers > 0")
    return found


def test_every_tour_step_runs_with_what_command_one_installs():
    taken = needs(tour_blocks())
    assert {"datapipe", "dvc", "torch"} <= set(taken), taken  # the tour still has these steps
    missing = {d: where for d, where in taken.items() if d not in command_one_installs()}
    assert not missing, f"command 1 does not install: {missing}"


def test_command_one_pins_the_torch_the_tests_run_with():
    def torch_pin(extra: str) -> str:
        reqs = [Requirement(r) for r in md.requires("datapipe") if f'extra == "{extra}"' in r]
        return next(str(r.specifier) for r in reqs if r.name == "torch")

    assert torch_pin("examples") == torch_pin("dev") == "==2.13.0"
