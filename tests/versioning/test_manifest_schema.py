"""The check in tests/conftest.py that validates every manifest the tests leave behind really runs
and fails."""

import shutil
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).parents[1]

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
    assert outcomes.get("passed") == 3 and outcomes.get("failed") == 2 and outcomes.get("errors") == 1, outcomes
    out = result.stdout.str()
    assert "FAILED tests/test_inner.py::test_broken_local_manifest_fails" in out
    assert "shards/0/samples: 'many' is not of type 'integer'" in out
    assert "FAILED tests/test_inner.py::test_broken_memory_manifest_fails" in out
    assert "lineage: 'none' is not of type 'object'" in out
    assert "ERROR tests/test_inner.py::test_uses_a_module_store" in out or "ERROR at teardown" in out
    assert "shared0/store/toy/versions" in out
