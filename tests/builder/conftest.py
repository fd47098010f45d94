import json
import textwrap
from pathlib import Path

import jsonschema
import pytest

from datapipe.builder.config import load_pipeline
from datapipe.builder.run import BuildResult, Execution, build
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store

REPO = Path(__file__).parents[2]
MANIFEST_SCHEMA = json.loads((REPO / "schemas" / "manifest.schema.json").read_text())


class Project:
    """A temporary directory with pipeline files, raw data and a store."""

    def __init__(self, root: Path, copy_digits=None) -> None:
        self.root = root
        self.store = Store(str(root / "store"))
        self._copy_digits = copy_digits

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

    def build(
        self, pipeline: Path | str = "pipeline.yaml", client=None, tags=(), **execution
    ) -> BuildResult:
        """Build ``pipeline`` into this project's store; ``execution``: the other Execution
        settings."""
        loaded = load_pipeline(self.root / pipeline)
        result = build(
            loaded, self.store, tags=tags, execution=Execution(client=client, **execution)
        )
        manifest_path = self.store.path(
            result.manifest.name, "versions", result.manifest.version, "manifest.json"
        )
        jsonschema.validate(json.loads(Path(manifest_path).read_text()), MANIFEST_SCHEMA)
        return result

    def samples(self, result: BuildResult | Manifest, store: Store | None = None) -> list[dict]:
        """The samples of a build (or of a version's manifest in ``store``, default this
        project's)."""
        from datapipe.formats.shards import open_shard

        manifest = result.manifest if isinstance(result, BuildResult) else result
        out = []
        directory = Path((store or self.store).path(manifest.name, "versions", manifest.version))
        for entry in manifest.shards:
            with open_shard(directory / entry.path, manifest.shard_format, copy=True) as reader:
                out.extend(dict(s) for s in reader)
        return out

    def digits(self) -> Path:
        """The shipped digits example, copied here with its raw data prepared."""
        self._copy_digits(self.root, "digits.yaml", "digits_tfrecord.yaml", "digits_code.py")
        return self.root / "digits.yaml"


@pytest.fixture
def project(tmp_path, copy_digits) -> Project:
    return Project(tmp_path, copy_digits)
