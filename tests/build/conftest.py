import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest

from datapipe.build.config import load_pipeline
from datapipe.build.run import BuildResult, build
from datapipe.versioning.store import Store

REPO = Path(__file__).parents[2]
MANIFEST_SCHEMA = json.loads((REPO / "schemas" / "manifest.schema.json").read_text())


@pytest.fixture(scope="session")
def dask_client():
    """One real LocalCluster (2 worker processes) shared by the build tests that do not test the cluster itself."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield client


class Project:
    """A temporary directory with pipeline files, raw data and a store."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = Store(str(root / "store"))

    def write(self, name: str, text: str | bytes) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(textwrap.dedent(text))
        return path

    def pipeline(self, text: str, name: str = "pipeline.yaml") -> Path:
        return self.write(name, text)

    def build(self, pipeline: Path | str = "pipeline.yaml", client=None, **kw) -> BuildResult:
        result = build(load_pipeline(self.root / pipeline), self.store, client=client, **kw)
        manifest_path = self.store.path(result.manifest.name, "versions", result.manifest.version, "manifest.json")
        jsonschema.validate(json.loads(Path(manifest_path).read_text()), MANIFEST_SCHEMA)
        return result

    def samples(self, result: BuildResult) -> list[dict]:
        from datapipe.formats.shards import open_shard

        out = []
        directory = Path(self.store.path(result.manifest.name, "versions", result.manifest.version))
        for entry in result.manifest.shards:
            with open_shard(directory / entry.path, result.manifest.shard_format, copy=True) as reader:
                out.extend(dict(s) for s in reader)
        return out

    def digits(self) -> Path:
        """The shipped digits example, copied here with its raw data prepared."""
        for name in ("digits.yaml", "digits_tfrecord.yaml", "digits_code.py"):
            shutil.copy(REPO / "pipelines" / name, self.root / name)
        subprocess.run([sys.executable, str(REPO / "pipelines" / "prepare_digits.py"), "--out",
                        str(self.root / "raw")], check=True, capture_output=True)
        return self.root / "digits.yaml"


@pytest.fixture
def project(tmp_path) -> Project:
    return Project(tmp_path)
