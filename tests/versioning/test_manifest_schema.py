"""schemas/manifest.schema.json: generated from the manifest's model, and the check in
tests/conftest.py that validates every manifest the tests leave behind really runs and fails."""

import json
import shutil
import textwrap
from pathlib import Path

import jsonschema
import pytest

from datapipe.versioning.manifest import Manifest, manifest_json_schema

TESTS = Path(__file__).parents[1]
SCHEMA_FILE = TESTS.parent / "schemas" / "manifest.schema.json"


def test_schema_file_matches_the_model():
    expected = json.dumps(manifest_json_schema(), indent=2, sort_keys=True) + "\n"
    assert SCHEMA_FILE.read_text() == expected, (
        "schemas/manifest.schema.json is out of date with datapipe/versioning/manifest.py; "
        "regenerate it with `python -m datapipe.versioning.manifest > schemas/manifest.schema.json`"
    )


def test_schema_is_valid_and_requires_what_every_manifest_has():
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"].startswith("https://json-schema.org/") and schema["title"]
    assert {"format_version", "version", "name", "shard_format", "fields", "shards"} <= set(
        schema["required"]
    )
    assert {"samples", "bytes"} <= set(schema["properties"])  # the totals beside the fields
    minimal = {"format_version": 2, "name": "toy", "version": "a" * 64, "shard_format": "tfrecord"}
    jsonschema.validate({**minimal, "fields": {}, "shards": []}, schema)
    assert (
        Manifest.from_json(
            json.dumps({**minimal, "fields": {}, "shards": []}).encode(), "m"
        ).samples
        == 0
    )


INNER = """
import json
import uuid

import pytest
from sample_data import make_dataset

from datapipe.versioning.store import Store


def _break(path):
    raw = json.loads(path.read_text())
    raw["shards"][0]["samples"] = "many"
    path.write_text(json.dumps(raw))


def _manifest(url):
    store = Store(url.rsplit("/", 1)[0])
    return store.path("toy", "versions", store.resolve("toy"), "manifest.json")


def test_valid_manifest_passes(tmp_path):
    make_dataset(tmp_path / "store")


def test_broken_local_manifest_fails(tmp_path):
    from pathlib import Path
    _break(Path(_manifest(make_dataset(tmp_path / "store"))))


def test_broken_memory_manifest_fails():
    url = make_dataset(f"memory://inner/{uuid.uuid4().hex}")
    store = Store(url.rsplit("/", 1)[0])
    path = _manifest(url)
    raw = json.loads(store.fs.cat_file(path))
    raw["lineage"] = "none"
    store.fs.pipe_file(path, json.dumps(raw).encode())


@pytest.fixture(scope="module")
def module_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("shared") / "store"
    from pathlib import Path
    _break(Path(_manifest(make_dataset(root))))
    return root


def test_uses_a_module_store(module_store):
    pass


@pytest.mark.broken_manifests
def test_marked_test_may_break_manifests(tmp_path):
    from pathlib import Path
    _break(Path(_manifest(make_dataset(tmp_path / "store"))))
"""


@pytest.mark.broken_manifests  # the inner session's
def test_the_conftest_check_fails_tests_that_leave_invalid_manifests(pytester):
    (pytester.path / "schemas").mkdir()
    shutil.copy(TESTS.parent / "schemas" / "manifest.schema.json", pytester.path / "schemas")
    (pytester.path / "tests").mkdir()
    for name in ("conftest.py", "sample_data.py"):
        shutil.copy(TESTS / name, pytester.path / "tests" / name)
    (pytester.path / "tests" / "test_inner.py").write_text(textwrap.dedent(INNER))
    result = pytester.runpytest_subprocess(
        "tests", "-p", "no:cacheprovider", "--rootdir", str(pytester.path), "-o", "pythonpath=tests"
    )
    outcomes = result.parseoutcomes()
    assert (
        outcomes.get("passed") == 3 and outcomes.get("failed") == 2 and outcomes.get("errors") == 1
    ), outcomes
    out = result.stdout.str()
    assert "FAILED tests/test_inner.py::test_broken_local_manifest_fails" in out
    assert "shards/0/samples: 'many' is not of type 'integer'" in out
    assert "FAILED tests/test_inner.py::test_broken_memory_manifest_fails" in out
    assert "lineage: 'none' is not of type 'object'" in out
    assert (
        "ERROR tests/test_inner.py::test_uses_a_module_store" in out or "ERROR at teardown" in out
    )
    assert "shared0/store/toy/versions" in out
