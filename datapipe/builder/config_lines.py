"""Where a pipeline file's problems are: each key's line, and pydantic's errors mapped onto them."""

from __future__ import annotations

import types
import typing
from typing import Any

import yaml
from pydantic import BaseModel

# (line, key path, message, the input shown): one line of a ConfigError
Problem = tuple[int, str, str, str]


def key_lines(node: yaml.Node, path: tuple, lines: dict[tuple, int]) -> list[Problem]:
    """Fill ``lines`` with key path -> 1-based line of the key (of the item, in lists); return
    duplicate keys."""
    problems = []
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub, line = (*path, str(key.value)), key.start_mark.line + 1
            if sub in lines:
                problems.append(
                    (line, dotted(sub), f"duplicate key (first on line {lines[sub]})", "")
                )
            lines.setdefault(sub, line)
            problems += key_lines(value, sub, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            problems += key_lines(item, (*path, i), lines)
    return problems


def dotted(path: tuple) -> str:
    """A key path as written in messages: ``stages[2].map``."""
    return (
        "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
        or "(top level)"
    )


def describe(err: dict, lines: dict[tuple, int], root: type[BaseModel]) -> Problem:
    """(line, key path, message, shown input) for one pydantic error of model ``root``, its
    location mapped back onto the YAML."""
    path: tuple = ()
    loc = err["loc"]
    for i, part in enumerate(loc):
        # Parts not in the file are pydantic's union/key tags, except the name of a missing key.
        hit = next((sub for sub in ((*path, part), (*path, str(part))) if sub in lines), None)
        if hit is not None or (i == len(loc) - 1 and err["type"] == "missing"):
            path = hit or (*path, str(part))
    if err["type"] in ("unknown_stage", "stage_value"):
        path = (*path, err["ctx"]["key"])
    elif err["type"] == "source_option":
        path = (*path, "options", err["ctx"]["key"])
        err = {**err, "msg": err["ctx"]["problem"]}
    line = next((lines[path[:n]] for n in range(len(path), 0, -1) if path[:n] in lines), 1)
    msg, shown = err["msg"].removeprefix("Value error, "), ""
    if err["type"] == "missing":
        msg = "required key is missing; add it"
    elif err["type"] == "extra_forbidden":
        allowed = model_at(root, path[:-1])
        msg = f"unknown key '{path[-1]}'" + (
            f"; use one of: {', '.join(allowed.model_fields)}" if allowed else ""
        )
    elif "[key]" in loc:
        msg = "keys here must be strings; quote it"
    elif isinstance(err.get("input"), (str, int, float, type(None))):
        shown = repr(err["input"])
        shown = f" (got {shown[:60] + '...' if len(shown) > 60 else shown})"
    return line, dotted(path), msg, shown


def model_at(root: type[BaseModel], path: tuple) -> type[BaseModel] | None:
    """The model class that validates the mapping at ``path`` of ``root`` (for listing its keys), if
    any."""
    tp: Any = root
    for part in (*path, None):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
            tp = args[0] if len(args) == 1 else None
        if part is None:
            break
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            tp = tp.model_fields[part].annotation if part in tp.model_fields else None
        elif typing.get_origin(tp) in (list, dict):
            tp = typing.get_args(tp)[-1]
        else:
            return None
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None
