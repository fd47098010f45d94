"""The fenced code blocks of a markdown page, with the `<!-- not run: why -->` marks of
docs/contributing.md."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^\s`]*)")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<why>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts, its info string (language), its text, and why it is not
    run (if so)."""

    page: str
    line: int
    info: str
    text: str
    not_run: str | None

    @property
    def where(self) -> str:
        """PAGE:LINE of the opening fence."""
        return f"{self.page}:{self.line}"


def blocks(path: Path, name: str) -> list[Block]:
    """The top-level fenced blocks of the page at ``path`` (blocks shown inside a longer fence are
    its text)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence = opening.group("fence")
        previous = next((line for line in reversed(lines[:i]) if line.strip()), "")
        mark = NOT_RUN.match(previous)
        end = i + 1
        closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        if end == len(lines):
            raise AssertionError(f"{name}:{i + 1}: a code fence that is never closed")
        indent = len(opening.group("indent"))
        text = "\n".join(line[indent:] for line in lines[i + 1 : end])
        why = mark.group("why") if mark else None
        found.append(Block(name, i + 1, opening.group("info").lower(), text + "\n", why))
        i = end + 1
    return found


def split_comment(line: str) -> tuple[str, str]:
    """A shell line's command and its trailing comment (a `#` outside quotes, at the start or after
    a space)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1 :].strip()
    return line.rstrip(), ""


def split_and(command: str) -> list[str]:
    """The commands of an `A && B && C` chain (`&&` outside quotes)."""
    parts, quote, start, i = [], None, 0, 0
    while i < len(command):
        char = command[i]
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif command.startswith("&&", i):
            parts.append(command[start:i].strip())
            start = i + 2
            i += 1
        i += 1
    parts.append(command[start:].strip())
    return [p for p in parts if p]
