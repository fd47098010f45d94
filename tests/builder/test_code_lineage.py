"""The code a pipeline's map stages call is found in the pipeline's own directory, as the workers
import it."""

import hashlib
import importlib
import sys

from datapipe.builder.config import load_pipeline
from datapipe.builder.lineage import code_refs

PIPELINE = """\
name: {name}
source: {{path: data.csv, format: csv}}
stages:
  - map: {module}:fix
sample: {{key: id, fields: {{txt: text}}}}
"""


def project(root, name, module, body):
    directory = root / name
    (directory / module.split(".")[0]).parent.mkdir(parents=True, exist_ok=True)
    parts = module.split(".")
    for depth in range(1, len(parts)):
        package = directory.joinpath(*parts[:depth])
        package.mkdir(exist_ok=True)
        (package / "__init__.py").write_text("")
    code = directory.joinpath(*parts[:-1], parts[-1] + ".py")
    code.write_text(body)
    (directory / "data.csv").write_text("id,text\na,x\n")
    (directory / "p.yaml").write_text(PIPELINE.format(name=name, module=module))
    return load_pipeline(str(directory / "p.yaml")), hashlib.sha256(code.read_bytes()).hexdigest()


def test_a_same_named_module_already_imported_from_another_project_is_not_the_one_hashed(tmp_path):
    for module in ("lineage_twin", "lineage_pkg.clean"):
        first, first_sha = project(tmp_path, "one", module, "def fix(df):\n    return df\n")
        second, second_sha = project(
            tmp_path, "two", module, "def fix(df):\n    return df.copy()\n"
        )
        try:
            sys.path.insert(0, first.base_dir)
            # a long-lived process (a notebook, a test run) imported project one's
            importlib.import_module(module)
            sys.path.remove(first.base_dir)
            assert [r.sha256 for r in code_refs(first.pipeline, first.base_dir)] == [first_sha]
            assert [r.sha256 for r in code_refs(second.pipeline, second.base_dir)] == [second_sha]
        finally:
            for name in [m for m in sys.modules if m.split(".")[0] == module.split(".")[0]]:
                del sys.modules[name]
            for d in (first.base_dir, second.base_dir):
                while d in sys.path:
                    sys.path.remove(d)


def test_a_worker_loads_the_pipelines_own_file_of_a_module_it_imported_from_a_directory_now_gone(
    tmp_path,
):
    """A long-lived worker (the --scheduler cluster's) ran a build whose project directory was then
    removed; the same module, byte for byte, in another project is imported from there."""
    import shutil

    from datapipe.builder.user_code import load_function

    for module in ("loader_twin", "loader_pkg.clean"):
        body = "def fix(df):\n    return df\n"
        first, sha = project(tmp_path / module, "one", module, body)
        second, _ = project(tmp_path / module, "two", module, body)
        try:
            assert load_function(
                f"{module}:fix", first.base_dir, sha
            ).__code__.co_filename.startswith(first.base_dir)
            shutil.rmtree(first.base_dir)
            fix = load_function(f"{module}:fix", second.base_dir, sha)
            assert fix.__code__.co_filename.startswith(second.base_dir)
        finally:
            for name in [m for m in sys.modules if m.split(".")[0] == module.split(".")[0]]:
                del sys.modules[name]
            for d in (first.base_dir, second.base_dir):
                while d in sys.path:
                    sys.path.remove(d)


def test_source_files_are_hashed_a_group_per_task(tmp_path):
    from datapipe.builder.lineage import HASH_GROUP_FILES, hash_tasks
    from datapipe.builder.source.base import InputFile
    from datapipe.storage.fs import filesystem

    paths = []
    for i in range(HASH_GROUP_FILES + 3):
        (tmp_path / f"{i}.bin").write_bytes(str(i).encode())
        paths.append(InputFile(str(tmp_path / f"{i}.bin"), f"{i}.bin", len(str(i))))
    import hashlib

    import dask

    tasks = hash_tasks(filesystem(str(tmp_path))[0], paths)
    hashed = [f for group in dask.compute(*tasks, scheduler="sync") for f in group]
    assert len(tasks) == 2 and [f.path for f in hashed] == [p.label for p in paths]
    assert hashed[7].hash == "sha256:" + hashlib.sha256(b"7").hexdigest()
