"""The docs' generated sections: written into the pages, checked by the site build and a test.

Each reference that could drift from the code is made from the file the code is checked against:
the pipeline file's and the manifest's JSON Schemas (schemas/, kept in sync with the models by
tests), the import-linter contracts (pyproject.toml), the exception tree's exit codes
(datapipe.errors) and the commands (datapipe.cli.main). The text stands in the page between
`<!-- generated: NAME -->` and `<!-- end generated -->`, so a page read on the repository shows
it; `python docs/hooks/generated.py` rewrites it, and the MkDocs hook fails a build of stale pages.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the docs build on 3.11+, but the hook should not break an import on 3.10
    tomllib = None

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"(<!-- generated: ([a-z-]+) -->\n)(.*?)(<!-- end generated -->)", re.S)
OPENING = re.compile(r"<!-- generated: ([a-z-]+) -->")
PAGES = (
    "docs/reference/pipeline.md",
    "docs/reference/store.md",
    "docs/reference/cli.md",
    "docs/architecture.md",
)


def _cell(text: str) -> str:
    """Text on one line of a markdown table (a `|` inside a code span does not split the cell)."""
    return text.replace("\n", " ")


def _code(value: Any) -> str:
    """A JSON value as inline code."""
    shown = json.dumps(value, sort_keys=True)
    return f"`{shown}`"


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """A node's $ref target: (definition name, definition), or (None, node) when it is not a
    reference."""
    ref = node.get("$ref")
    if ref is None:
        return None, node
    name = ref.rsplit("/", 1)[-1]
    return name, schema["$defs"][name]


def _is_section(definition: dict[str, Any]) -> bool:
    """Whether a definition gets a section of its own (an object with named keys) or is shown
    inline."""
    return definition.get("type") == "object" and "properties" in definition


def _type(schema: dict[str, Any], node: dict[str, Any], link: Callable[[str], str]) -> str:
    """A short, readable type of a schema node (references to sections become links)."""
    name, target = _resolve(schema, node)
    if name is not None:
        return link(name) if _is_section(target) else _type(schema, target, link)
    for key in ("anyOf", "oneOf"):
        if key in node:
            return " or ".join(dict.fromkeys(_type(schema, option, link) for option in node[key]))
    if "const" in node:
        return _code(node["const"])
    if "enum" in node:
        return " or ".join(_code(v) for v in node["enum"])
    kind = node.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return (
            f"list of {_type(schema, node.get('items', {}), link)}" if node.get("items") else "list"
        )
    if kind == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return f"mapping of string to {_type(schema, extra, link)}"
        return "mapping" if "properties" not in node else "object"
    return kind or "any"


def _constraints(node: dict[str, Any]) -> list[str]:
    """The constraints of a node and of the options it allows, as short phrases."""
    found = []
    for option in (node, *node.get("anyOf", ()), *node.get("oneOf", ())):
        for key, phrase in (
            ("pattern", "matches"),
            ("minimum", ">="),
            ("maximum", "<="),
            ("minLength", "length >="),
            ("minProperties", "keys >="),
            ("maxProperties", "keys <="),
        ):
            if key in option:
                found.append(f"{phrase} `{option[key]}`")
    return found


def _rows(
    schema: dict[str, Any], node: dict[str, Any], prefix: str, link: Callable[[str], str]
) -> Iterator[str]:
    """Table rows for the keys of an object node; inline objects (not sections) are flattened as
    KEY.SUBKEY."""
    required = set(node.get("required", ()))
    for key, child in sorted(node.get("properties", {}).items()):
        path = f"{prefix}{key}"
        name, target = _resolve(schema, child)
        if name is None and target.get("type") == "array":
            item_name, item = _resolve(schema, target.get("items", {}))
            if item_name is None and _is_section(item):
                yield _row(schema, path, child, key in required, link)
                yield from _rows(schema, item, f"{path}[].", link)
                continue
        yield _row(schema, path, child, key in required, link)
        if name is None and _is_section(target):
            yield from _rows(schema, target, f"{path}.", link)


def _row(
    schema: dict[str, Any],
    path: str,
    node: dict[str, Any],
    required: bool,
    link: Callable[[str], str],
) -> str:
    """One table row: key, type, required or default, constraints and description."""
    _, target = _resolve(schema, node)
    default = (
        "required" if required else (_code(node["default"]) if "default" in node else "optional")
    )
    notes = _constraints(target if target is not node else node)
    description = node.get("description") or (
        target.get("description") if target is not node and not _is_section(target) else None
    )
    if description:
        notes.append(description)
    return (
        f"| `{path}` | {_cell(_type(schema, node, link))} | {_cell(default)} | "
        f"{_cell('; '.join(notes))} |"
    )


def _sections(schema: dict[str, Any]) -> list[tuple[str, str]]:
    """(definition name, YAML path where it is used) for every section, in the order a reader meets
    them."""
    order: list[tuple[str, str]] = []
    seen: set[str] = set()

    def visit(node: Any, path: str) -> None:
        if isinstance(node, dict):
            name, target = _resolve(schema, node)
            if name is not None and name not in seen and _is_section(target):
                seen.add(name)
                order.append((name, path))
                visit(target, path)
                return
            for key, child in node.items():
                if key == "properties":
                    for prop, sub in sorted(child.items()):
                        visit(sub, f"{path}.{prop}".lstrip("."))
                elif key == "items":
                    visit(child, f"{path}[]")
                elif key == "additionalProperties":
                    visit(child, f"{path}.COLUMN")
                elif key in ("anyOf", "oneOf"):
                    visit(child, path)
        elif isinstance(node, list):
            for child in node:
                visit(child, path)

    visit({k: v for k, v in schema.items() if k != "$defs"}, "")
    return order


def schema_reference(path: Path) -> str:
    """Markdown tables of a JSON Schema: the top level, then one section per object definition."""
    schema = json.loads(path.read_text())
    sections = _sections(schema)
    anchors = {name: name.lower() for name, _ in sections}

    def link(name: str) -> str:
        return f"[{name}](#{anchors[name]})"

    header = "| key | type | default | constraints and meaning |\n|---|---|---|---|"
    out = [f"Generated from `{path.relative_to(ROOT).as_posix()}`.", ""]
    if schema.get("description"):
        out += [schema["description"], ""]
    out += [header, *_rows(schema, schema, "", link), ""]
    for name, used_at in sections:
        definition = schema["$defs"][name]
        out += [f"### {name} {{#{anchors[name]}}}", "", f"At `{used_at}`."]
        if definition.get("description"):
            out += ["", definition["description"]]
        extra = []
        if definition.get("additionalProperties") is False:
            extra.append("unknown keys are an error")
        extra += _constraints(definition)
        if extra:
            out += ["", f"Rules: {'; '.join(extra)}."]
        out += ["", header, *_rows(schema, definition, "", link), ""]
    return "\n".join(out)


def import_contracts() -> str:
    """The import-linter contracts of pyproject.toml, as a list."""
    if tomllib is None:
        return "(the import contracts are listed when the docs are built with Python 3.11 or later)"
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    out = [
        "Generated from `pyproject.toml` (`[tool.importlinter]`); "
        "CI checks them with `lint-imports`.",
        "",
    ]
    for contract in config["contracts"]:
        out.append(f"- **{contract['name']}** ({contract['type']})")
        if contract["type"] == "layers":
            out += [f"    {i}. `{layer}`" for i, layer in enumerate(contract["layers"], 1)]
        elif contract["type"] == "acyclic_siblings":
            ancestors = ", ".join(f"`{m}`" for m in contract["ancestors"])
            out.append(
                f"    - no module or package below {ancestors} imports one that imports it back"
            )
        else:
            sources = ", ".join(f"`{m}`" for m in contract["source_modules"])
            forbidden = ", ".join(f"`{m}`" for m in contract["forbidden_modules"])
            out.append(f"    - may not import {forbidden}: {sources}")
    return "\n".join(out) + "\n"


def exit_codes() -> str:
    """A table of the exception tree's classes and their exit codes, from datapipe.errors."""
    errors = importlib.import_module("datapipe.errors")
    base = errors.DatapipeError
    classes = [
        c
        for _, c in inspect.getmembers(errors, inspect.isclass)
        if issubclass(c, base) and c.__module__ == errors.__name__
    ]
    classes.sort(key=lambda c: (c.exit_code, c is not base, c.__name__))
    out = ["| exit | error | raised for |", "|---|---|---|"]
    for c in classes:
        summary = (inspect.getdoc(c) or "").split("\n\n", 1)[0]
        parents = [p.__name__ for p in c.__mro__[1:] if issubclass(p, base) and p is not base]
        also = f" (a {parents[0]})" if parents and parents[0] != c.__name__ else ""
        out.append(f"| {c.exit_code} | `{c.__name__}`{also} | {_cell(summary)} |")
    return "\n".join(out) + "\n"


def commands() -> str:
    """A table of the commands at a glance: usage and the first sentence of each one's help."""
    import click

    main = importlib.import_module("datapipe.cli.main").cli
    context = click.Context(main, info_name="datapipe")
    out = [
        "| command | what it does |",
        "|---|---|",
        "| `datapipe --version` | print the version |",
    ]
    for name in sorted(main.list_commands(context)):
        command = main.get_command(context, name)
        sub = click.Context(command, info_name=name, parent=context)
        usage = " ".join(command.collect_usage_pieces(sub)).replace("|", " or ")
        summary = command.get_short_help_str(limit=1000)
        out.append(f"| `datapipe {name} {usage}` | {_cell(summary)} |")
    return "\n".join(out) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "pipeline-schema": lambda: schema_reference(ROOT / "schemas" / "pipeline.schema.json"),
    "manifest-schema": lambda: schema_reference(ROOT / "schemas" / "manifest.schema.json"),
    "import-contracts": import_contracts,
    "exit-codes": exit_codes,
    "commands": commands,
}


def filled(markdown: str, where: str) -> str:
    """``markdown`` with each generated section made anew; an unknown or unclosed marker is an
    error naming ``where``."""
    openings = OPENING.findall(markdown)
    sections = MARKER.findall(markdown)
    if len(openings) != len(sections):
        raise ValueError(
            f"{where}: a <!-- generated: NAME --> marker without <!-- end generated -->"
        )
    for name in openings:
        if name not in GENERATORS:
            raise ValueError(
                f"{where}: unknown marker <!-- generated: {name} -->; "
                f"known: {', '.join(sorted(GENERATORS))}"
            )
    return MARKER.sub(
        lambda m: f"{m.group(1)}\n{GENERATORS[m.group(2)]().strip()}\n\n{m.group(4)}", markdown
    )


def stale_pages() -> list[str]:
    """The pages whose generated sections differ from what the generators make now."""
    return [p for p in PAGES if filled((ROOT / p).read_text(), p) != (ROOT / p).read_text()]


def on_pre_build(config: Any) -> None:
    """Fail the site build when a page's generated sections are stale."""
    stale = stale_pages()
    if stale:
        raise ValueError(
            f"generated sections out of date in {', '.join(stale)}: "
            "run python docs/hooks/generated.py"
        )


def main() -> None:
    """Rewrite the generated sections of every page that has them."""
    for page in PAGES:
        path = ROOT / page
        text = path.read_text()
        new = filled(text, page)
        if new != text:
            path.write_text(new)
            print(f"rewrote {page}")


if __name__ == "__main__":
    main()
