"""Lineage of real builds: user code, sources, canonical config, seed and tool versions are
recorded; what goes into the version id does, the environment does not; `datapipe check` names the
sample and field that changed."""

import hashlib
import json
import platform
import re
import subprocess
import textwrap
from pathlib import Path

import dask
import pyarrow
import pytest
from helpers.cli import datapipe_in_process, datapipe_installed, on_session_cluster

import datapipe
from datapipe.builder.config import load_pipeline
from datapipe.builder.run import Execution, build
from datapipe.versioning.manifest import CodeRef, SourceFile
from datapipe.versioning.rebuild_report import lineage_changes
from datapipe.versioning.store import Store
from datapipe.versioning.verify import verify_version

PIPELINE = """\
    name: words
    source: {{path: raw/words.csv, format: csv}}
    stages:
      - map: {module}:shout
    sample: {{key: id, fields: {{txt: text, cls: n}}}}
    shards: {{format: webdataset, shuffle_seed: {seed}}}
    """
CODE = """\
def shout(df):
    df = df.copy()
    df["text"] = df["text"].str.upper()
    return df
"""
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven"]


@pytest.fixture(scope="module")
def client(dask_client):
    """The session's Dask cluster (a long-lived one: its workers may hold another version of a map
    module)."""
    return dask_client


def make_project(root: Path, seed: int = 7) -> tuple[Path, str]:
    """A pipeline with one map stage in ROOT, and the name of the module holding that stage's code.

    The module's name is unique: the build finds it through importlib, which answers with any module
    of that name this process imported before (another test's), whatever file the pipeline's
    directory holds.
    """
    module = f"wordcode_{root.name}"
    (root / "raw").mkdir(parents=True, exist_ok=True)
    rows = [f"w{i:04d},{word},{i % 3}" for i, word in enumerate(WORDS)]
    (root / "raw/words.csv").write_text("id,text,n\n" + "\n".join(rows) + "\n")
    (root / f"{module}.py").write_text(CODE)
    (root / "pipeline.yaml").write_text(textwrap.dedent(PIPELINE.format(seed=seed, module=module)))
    return root / "pipeline.yaml", module


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_lineage_records_code_sources_config_seed_and_environment(tmp_path, client):
    pipeline, module = make_project(tmp_path)
    store = Store(str(tmp_path / "store"))
    m = build(load_pipeline(pipeline), store, execution=Execution(client=client)).manifest
    lineage = m.lineage
    assert lineage.code == (CodeRef(module, sha256(tmp_path / f"{module}.py")),)
    raw = tmp_path / "raw/words.csv"
    assert lineage.sources == (
        SourceFile("raw/words.csv", raw.stat().st_size, f"sha256:{sha256(raw)}"),
    )
    assert lineage.pipeline == load_pipeline(pipeline).pipeline.canonical()
    assert lineage.pipeline["stages"] == [{"map": f"{module}:shout"}]
    assert lineage.pipeline["shards"]["shuffle_seed"] == lineage.seed == 7
    env = lineage.environment
    assert (env["datapipe"], env["dask"], env["pyarrow"], env["python"]) == (
        datapipe.__version__,
        dask.__version__,
        pyarrow.__version__,
        platform.python_version(),
    )

    # the stored manifest says the same, and the environment is outside the version id: other tool
    # versions leave the id (and verify) as they are, another seed does not
    path = Path(store.path("words", "versions", m.version, "manifest.json"))
    stored = json.loads(path.read_text())
    assert (
        stored["lineage"]["environment"] == env and stored["lineage"]["code"][0]["module"] == module
    )
    stored["lineage"]["environment"] = {
        "datapipe": "0.0.1",
        "dask": "1.0",
        "pyarrow": "1.0",
        "python": "2.7.18",
    }
    path.write_text(json.dumps(stored))
    edited = store.manifest("words", m.version)
    assert edited.content_id() == m.version and verify_version(store, "words", edited) == []
    stored["lineage"]["seed"] = 8
    path.write_text(json.dumps(stored))
    problems = verify_version(store, "words", store.manifest("words", m.version))
    assert [(p.kind, Path(p.path).name) for p in problems] == [("mismatch", "manifest.json")]
    assert "not to the version id" in problems[0].detail


def test_editing_the_map_code_changes_the_version_and_undoing_it_restores_it(tmp_path, client):
    pipeline, module = make_project(tmp_path)
    store = Store(str(tmp_path / "store"))
    first = build(load_pipeline(pipeline), store, execution=Execution(client=client)).manifest
    again = build(load_pipeline(pipeline), store, execution=Execution(client=client)).manifest
    assert again.version == first.version  # same inputs, config and code: same id

    code = tmp_path / f"{module}.py"
    code.write_text(CODE + "# only a comment: the bytes are the same, the code is not\n")
    edited = build(load_pipeline(pipeline), store, execution=Execution(client=client)).manifest
    assert edited.version != first.version
    assert [s.sha256 for s in edited.shards] == [s.sha256 for s in first.shards]
    assert edited.lineage.code == (CodeRef(module, sha256(code)),)
    assert lineage_changes(first, edited) == [f"code changed: {module}"]

    code.write_text(CODE)
    assert (
        build(load_pipeline(pipeline), store, execution=Execution(client=client)).manifest.version
        == first.version
    )

    make_project(tmp_path, seed=8)  # same module, same code
    reseeded = build(load_pipeline(pipeline), store, execution=Execution(client=client)).manifest
    assert reseeded.version != first.version
    assert lineage_changes(first, reseeded) == [
        "pipeline config: shards.shuffle_seed",
        "seed: 7 -> 8",
    ]


def test_check_names_the_sample_and_field_that_changed(tmp_path, client):
    """`datapipe check` (in process): once with a cluster of its own, once on a running one
    (--scheduler)."""
    pipeline, _ = make_project(tmp_path)
    # what `datapipe build` makes
    build(
        load_pipeline(pipeline),
        Store(str(tmp_path / "storage")),
        execution=Execution(client=client),
    )

    def datapipe_cli(*args: str) -> subprocess.CompletedProcess:
        return datapipe_in_process(*args, cwd=tmp_path)

    # its embedded cluster
    assert datapipe_cli("check", "pipeline.yaml", "--workers", "1").returncode == 0

    raw = tmp_path / "raw/words.csv"
    raw.write_text(raw.read_text().replace("w0003,three,0", "w0003,tree,0"))
    out = datapipe_cli("check", "pipeline.yaml", *on_session_cluster(client.scheduler.address))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("not reproducible: words@")
    assert "  samples: 1 changed, 0 only in the recorded version, 0 only in the rebuild" in lines
    assert "  sample w0003 (shard-000000.tar): txt 'THREE' -> 'TREE'" in lines
    assert any(
        re.fullmatch(r"  lineage: source changed: raw/words.csv \(sha256:\w+ -> sha256:\w+\)", line)
        for line in lines
    ), lines
    assert not any("cls" in line for line in lines)  # the field that did not change is not named


def test_check_gives_up_on_an_unreachable_scheduler_after_scheduler_timeout(tmp_path, client):
    pipeline, _ = make_project(tmp_path)
    build(
        load_pipeline(pipeline),
        Store(str(tmp_path / "storage")),
        execution=Execution(client=client),
    )
    # the installed command (the `check` smoke test)
    out = datapipe_installed(
        "check",
        "pipeline.yaml",
        "--scheduler",
        "tcp://127.0.0.1:9",
        "--scheduler-timeout",
        "1",
        cwd=tmp_path,
    )
    assert out.returncode == 2 and "cannot connect to a Dask scheduler" in out.stderr, out.stderr
    assert "after 1 s" in out.stderr and "Traceback" not in out.stderr
