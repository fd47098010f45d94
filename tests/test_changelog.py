"""The package's version and the changelog agree, and the changelog names the formats it writes."""

import re
from pathlib import Path

import datapipe
from datapipe.versioning.manifest import FORMAT_VERSION

CHANGELOG = Path(__file__).parents[1] / "CHANGELOG.md"


def test_the_newest_release_is_the_package_version_and_names_the_manifest_format_it_writes():
    text = CHANGELOG.read_text()
    releases = re.findall(r"^## (\d+\.\d+\.\d+)$", text, re.M)
    assert releases and releases[0] == datapipe.__version__, releases
    newest = text.split(f"## {releases[0]}", 1)[1].split("\n## ", 1)[0]
    assert f"Writes manifest format {FORMAT_VERSION}" in newest
