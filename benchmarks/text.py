"""W5: real text for tokenizing, the Python standard library's and the installed packages' files as
JSONL documents (issue 31).

No one here wrote it and every machine with Python has some: every ``.py``, ``.pyi``, ``.rst``,
``.md`` and ``.txt`` file under the standard library's directory (less the interpreter's own
site-packages) and under ``sys.prefix`` (the venv: its site-packages, with the packages' sources,
docstrings and documentation), one document a
file at its natural length. Files that are not UTF-8 or hold only whitespace are skipped and
counted. Paths are sorted (by root, then path), so the same files give the same bytes; documents
are written in that order into parts of about 16 MB, ``DIR/part-00000.jsonl`` .., one object a
line: ``{"id": "w5-0000000", "path": "stdlib/json/decoder.py", "kind": "py", "text": ...}``.

Written once: ``DIR.json`` (next to the folder, so that a source of ``DIR/*.jsonl`` sees only the
parts) records the spec, the listing's digest and the stats, and a folder whose listing matches is
reused. The text depends on what is installed: the stats and the digest are part of every result.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import sysconfig
from dataclasses import asdict, dataclass

FORMAT = 1  # bump when the documents change, so an old folder is remade
SUFFIXES = (".py", ".pyi", ".rst", ".md", ".txt")
SKIP_DIRS = {"__pycache__", ".git"}
# the interpreter's own packages are not the standard library; the venv's are under sys.prefix
SKIP_UNDER_STDLIB = {"site-packages", "dist-packages"}


@dataclass(frozen=True)
class TextWorkload:
    """Every ``every``-th file of the listing, at least ``min_bytes`` of text (documents repeated in
    order only when the machine has less), in JSONL parts of about ``part_bytes``."""

    name: str = "w5"
    min_bytes: int = 256 * 10**6
    part_bytes: int = 16 * 10**6
    every: int = 1

    def describe(self) -> str:
        """One line for the log and the table."""
        files = "files" if self.every == 1 else f"files (every {self.every}th)"
        return (
            f"{self.name}: the standard library's and site-packages' .py/.pyi/.rst/.md/.txt "
            f"{files}, one JSONL document each"
            + (f", at least {self.min_bytes / 1e6:.0f} MB of text" if self.min_bytes else "")
        )


def text_workload(quick: bool) -> TextWorkload:
    """W5 whole (~314 MB on the dev VM), or with ``quick`` every 10th file (~31 MB), no minimum."""
    if quick:
        return TextWorkload("w5-quick", min_bytes=0, every=10)
    return TextWorkload()


def roots() -> list[tuple[str, str]]:
    """(label, directory): the standard library, then ``sys.prefix`` (the venv's packages)."""
    return [("stdlib", sysconfig.get_paths()["stdlib"]), ("prefix", sys.prefix)]


def listing(exclude: str | None = None) -> list[tuple[str, str, int]]:
    """(document path, file path, size) of every text file, sorted; a file reached from two roots
    (a venv inside the stdlib's prefix) is listed once, under the first."""
    seen: set[str] = set()
    files = []
    for label, top in roots():
        for d, dirs, names in os.walk(top):
            dirs[:] = sorted(
                x
                for x in dirs
                if x not in SKIP_DIRS
                and not (label == "stdlib" and d == top and x in SKIP_UNDER_STDLIB)
                and not (exclude and os.path.realpath(os.path.join(d, x)) == exclude)
            )
            for name in sorted(names):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(d, name)
                real = os.path.realpath(path)
                if real in seen or not os.path.isfile(real):
                    continue
                seen.add(real)
                rel = os.path.relpath(path, top).replace(os.sep, "/")
                files.append((f"{label}/{rel}", path, os.path.getsize(real)))
    return sorted(files)


def _digest(files: list[tuple[str, str, int]]) -> str:
    h = hashlib.sha256(f"{FORMAT}\n".encode())
    for name, _, size in files:
        h.update(f"{name}\t{size}\n".encode())
    return h.hexdigest()


def _documents(files: list[tuple[str, str, int]], stats: dict):
    """(path, kind, text) of every file that is UTF-8 and not blank, counting the others."""
    for name, path, _ in files:
        with open(path, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            stats["skipped_not_utf8"] += 1
            continue
        if not text.strip():
            stats["skipped_blank"] += 1
            continue
        yield name, name.rsplit(".", 1)[1], text


def _write(w: TextWorkload, files: list, out: str) -> dict:
    stats = {"files": len(files), "skipped_not_utf8": 0, "skipped_blank": 0, "repeats": 0}
    docs = text_bytes = part = part_size = 0
    digest = hashlib.sha256()
    f = open(os.path.join(out, f"part-{part:05d}.jsonl"), "wb")
    while True:
        for name, kind, text in _documents(files, stats):
            line = (
                json.dumps(
                    {"id": f"w5-{docs:07d}", "path": name, "kind": kind, "text": text},
                    ensure_ascii=False,
                ).encode()
                + b"\n"
            )
            if part_size and part_size + len(line) > w.part_bytes:
                f.close()
                part, part_size = part + 1, 0
                f = open(os.path.join(out, f"part-{part:05d}.jsonl"), "wb")
            f.write(line)
            digest.update(line)
            part_size += len(line)
            docs += 1
            text_bytes += len(text.encode())
        if text_bytes >= w.min_bytes or not docs:
            break
        stats["repeats"] += 1  # too little text here: the same documents again, new ids
    f.close()
    return {
        **stats,
        "documents": docs,
        "text_bytes": text_bytes,
        "parts": part + 1,
        "sha256": digest.hexdigest(),
    }


def generate(w: TextWorkload, directory: str) -> dict:
    """Write W5 into ``directory`` unless a folder of the same listing is there; its stats."""
    meta = directory.rstrip("/") + ".json"
    files = listing(exclude=os.path.realpath(directory))[:: w.every]
    spec = {**asdict(w), "format": FORMAT, "listing": _digest(files), "roots": roots()}
    if os.path.exists(meta) and os.path.isdir(directory):
        with open(meta) as f:
            old = json.load(f)
        if old.get("spec") == spec:
            return old["stats"]
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    stats = _write(w, files, directory)
    with open(meta, "w") as f:
        json.dump({"spec": spec, "stats": stats}, f, indent=1)
    return stats


def parts(directory: str) -> list[str]:
    """The JSONL parts, in order."""
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".jsonl"))


def texts(directory: str) -> list[str]:
    """Every document's text, in order (in memory: a few hundred MB)."""
    out = []
    for path in parts(directory):
        with open(path, encoding="utf-8") as f:
            out.extend(json.loads(line)["text"] for line in f)
    return out
