"""The docs' generated sections stand in the pages as the generators make them now."""

from __future__ import annotations

import importlib.util

import pytest
from helpers.doc_pages import REPO

spec = importlib.util.spec_from_file_location("generated", REPO / "docs/hooks/generated.py")
generated = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generated)


def test_every_page_holds_its_generated_sections_as_made_now():
    assert generated.stale_pages() == [], "run python docs/hooks/generated.py"


def test_the_command_table_lists_every_command():
    table = generated.commands()
    for name in ("audit", "batches", "build", "serve", "verify"):
        assert f"| `datapipe {name} " in table


def test_a_stale_section_is_made_anew_and_an_unclosed_marker_is_an_error():
    stale = "# X\n<!-- generated: exit-codes -->\nold text\n<!-- end generated -->\nafter\n"
    fresh = generated.filled(stale, "x.md")
    assert "old text" not in fresh and "| exit | error |" in fresh and fresh.endswith("after\n")
    with pytest.raises(ValueError, match="x.md: a <!-- generated: NAME --> marker without"):
        generated.filled("<!-- generated: exit-codes -->\n", "x.md")
    with pytest.raises(ValueError, match="unknown marker <!-- generated: nope -->"):
        generated.filled("<!-- generated: nope -->\n<!-- end generated -->\n", "x.md")
