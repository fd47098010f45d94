"""Settings and checks shared by every test directory.

Every manifest a test leaves in a store (under its tmp_path, in memory:// or under any other
pytest temporary directory, CLI subprocess builds included) is validated against
schemas/manifest.schema.json when the test ends; a test that breaks manifests on purpose is
marked ``broken_manifests``.
"""

import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["pytester"]

# CI runs the whole suite on 2 cores: keep the default sweep modest, allow a longer one on demand.
settings.register_profile(
    "default",
    max_examples=60,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
settings.register_profile(
    "long", max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# The suite writes gigabytes it throws away, so its temporary files go to a tmpfs with room where
# there is one (unless TMPDIR is set), not to a disk that may throttle writes.
MEMORY_TMP, MEMORY_TMP_FREE = Path("/dev/shm"), 8 << 30


def _is_tmpfs(path: Path) -> bool:
    """Whether ``path`` is the mount point of a tmpfs (False where /proc/mounts cannot tell)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[1:3] == [str(path), "tmpfs"] for line in mounts)


def _in_memory_tmp() -> None:
    """Point TMPDIR at MEMORY_TMP, unless TMPDIR is set or MEMORY_TMP is no writable tmpfs with
    room."""
    if (
        "TMPDIR" not in os.environ
        and _is_tmpfs(MEMORY_TMP)
        and os.access(MEMORY_TMP, os.W_OK)
        and shutil.disk_usage(MEMORY_TMP).free >= MEMORY_TMP_FREE
    ):
        os.environ["TMPDIR"] = str(MEMORY_TMP)
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again


_in_memory_tmp()

# The builds of the suite start their clusters without Dask's dashboard, whose Bokeh server is a
# sizeable part of a cluster's start; tests/builder/test_cli.py checks `datapipe build`'s default
# (the dashboard, its link) on a terminal.
os.environ["DATAPIPE_DASHBOARD"] = "0"

REPO = Path(__file__).parents[1]
MANIFEST_SCHEMA_PATH = REPO / "schemas" / "manifest.schema.json"
_VALIDATOR = jsonschema.Draft202012Validator(json.loads(MANIFEST_SCHEMA_PATH.read_text()))
_checked: set[str] = set()  # manifest files already validated (or exempt) in this session
_MEMORY_BEFORE = pytest.StashKey[dict]()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "broken_manifests: the test writes manifests that break the schema on "
        "purpose (not validated)",
    )
    # pytest-xdist's --dist loadfile hands out the files in collection order (see
    # pytest_collection_modifyitems), not the files with the most tests first, which left the
    # few-test, long ones (DDP, DVC) for the end. As --no-loadscope-reorder would, but set here, so
    # that a run without xdist (-p no:xdist) still parses.
    if (
        getattr(config.option, "loadscopereorder", False)
        and "--loadscope-reorder" not in config.invocation_params.args
    ):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    # the interpreter's last garbage collection at exit walks every object torch, Dask and pyarrow
    # left alive, for seconds, and the run waits for each xdist worker to exit: leave them out of it
    # (tests/s3/conftest.py does the same per test, and ddp_run.py at a rank's end)
    gc.freeze()


def manifest_problems(data: bytes, where: str) -> list[str]:
    """Why a stored manifest breaks the schema or the store layout (empty when it is valid)."""
    try:
        manifest = json.loads(data)
    except ValueError as e:
        return [f"{where}: not JSON ({e})"]
    problems = [
        f"{where}: {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
        for e in _VALIDATOR.iter_errors(manifest)
    ]
    directory = where.replace("\\", "/").rsplit("/", 2)[-2]
    if isinstance(manifest, dict) and manifest.get("version") != directory:
        problems.append(
            f"{where}: version {manifest.get('version')!r} is not its directory's "
            f"name {directory!r}"
        )
    return problems


def _local_manifests(root: Path) -> list[Path]:
    """manifest.json files of store versions (STORE/NAME/versions/VERSION/manifest.json) below
    root."""
    found = []
    for directory, _, files in os.walk(root):
        if "manifest.json" in files and Path(directory).parent.name == "versions":
            found.append(Path(directory) / "manifest.json")
    return sorted(found)


def _memory_manifests() -> dict[str, bytes]:
    from fsspec.implementations.memory import MemoryFileSystem

    return {
        path: bytes(f.getbuffer())
        for path, f in list(MemoryFileSystem.store.items())
        if path.endswith("/manifest.json") and path.rsplit("/", 3)[-3] == "versions"
    }


def _check_local(root: Path, exempt: bool) -> list[str]:
    problems = []
    for path in _local_manifests(root):
        if str(path) in _checked:
            continue
        _checked.add(str(path))
        if not exempt:
            problems += manifest_problems(path.read_bytes(), str(path))
    return problems


COSTLY = ("slow", "distributed", "s3")  # the markers of cost (pyproject's markers)


def pytest_collection_modifyitems(items):
    """The files holding costly tests first, each file's tests in their order: pytest-xdist's
    loadfile hands files out in this order (pytest_configure), so that the long ones start early and
    no worker is left running one while the other is done."""
    costly = {item.path for item in items if any(item.get_closest_marker(m) for m in COSTLY)}
    # a stable sort: the order stays within each group
    items.sort(key=lambda item: item.path not in costly)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    # before fixtures run: they may write manifests too
    item.stash[_MEMORY_BEFORE] = _memory_manifests()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """When a test has passed, validate the manifests it wrote in its tmp_path and in memory://."""
    result = yield
    exempt = item.get_closest_marker("broken_manifests") is not None
    problems = []
    for root in (
        item.funcargs.get("tmp_path"),
        getattr(item.funcargs.get("pytester"), "path", None),
    ):
        if root is not None:
            problems += _check_local(root, exempt)
    if not exempt:
        before = item.stash.get(_MEMORY_BEFORE, {})
        problems += [
            p
            for path, data in _memory_manifests().items()
            if before.get(path) != data
            for p in manifest_problems(data, f"memory://{path.lstrip('/')}")
        ]
    if problems:
        pytest.fail(
            "manifests that break schemas/manifest.schema.json:\n" + "\n".join(problems),
            pytrace=False,
        )
    return result


@pytest.fixture(scope="session", autouse=True)
def _session_manifests_follow_the_schema(tmp_path_factory):
    """At the end, the manifests of session- and module-scoped temporary directories too."""
    yield
    problems = _check_local(tmp_path_factory.getbasetemp(), exempt=False)
    if problems:
        pytest.fail(
            "manifests that break schemas/manifest.schema.json:\n" + "\n".join(problems),
            pytrace=False,
        )


@pytest.fixture(scope="session")
def dask_client():
    """One real LocalCluster (2 worker processes) shared by the tests that build in process and do
    not test the cluster itself (the CLI builds that start one test the builds' own LocalClusters).
    """
    import dask
    from distributed import Client, LocalCluster

    with (
        dask.config.set(QUIET_WHILE_IDLE),
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


# The session's cluster idles between its tests: without the profiler and with slow housekeeping
# ticks it leaves the cores to them (memory-limit tests start clusters with Dask's defaults).
QUIET_WHILE_IDLE = {
    "distributed.worker.profile.enabled": False,
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
}


@pytest.fixture(scope="session")
def in_process():
    """The client a small build gets when it asks for no cluster: Dask's threaded scheduler, 2
    threads in this process (builder.client's InProcessClient). For the tests of what a build makes;
    the tests of workers, transport between processes and errors raised on workers take dask_client
    or a cluster of their own."""
    from datapipe.builder.in_process import InProcessClient

    return InProcessClient(threads=2)


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 API server (moto's S3 app) on 127.0.0.1; yields its endpoint URL."""
    from helpers.s3 import S3Server

    server = S3Server()
    yield server.endpoint
    server.stop()


@pytest.fixture(scope="session")
def scheduler(dask_client) -> str:
    """The address of the session's Dask scheduler, for `datapipe build|check --scheduler` run in
    process."""
    return dask_client.scheduler.address


@pytest.fixture(scope="session")
def copy_digits(tmp_path_factory):
    """copy_digits(directory, *pipeline_files): the digits example (the pipeline files named, from
    pipelines/) with its prepared raw data in DIRECTORY/raw, as `prepare_digits.py --out
    DIRECTORY/raw` leaves it.

    pipelines/prepare_digits.py runs once, at the first copy (it takes seconds: scikit-learn's
    import); its output is the same every run."""
    prepared: list[Path] = []

    def copy(directory: Path, *files: str) -> Path:
        if not prepared:
            raw = tmp_path_factory.mktemp("digits-raw") / "raw"
            subprocess.run(
                [sys.executable, str(REPO / "pipelines" / "prepare_digits.py"), "--out", str(raw)],
                check=True,
                capture_output=True,
            )
            prepared.append(raw)
        directory.mkdir(parents=True, exist_ok=True)
        for name in files:
            shutil.copy(REPO / "pipelines" / name, directory / name)
        shutil.copytree(prepared[0], directory / "raw")
        return directory

    return copy


@pytest.fixture(scope="session")
def digits_built(tmp_path_factory, copy_digits, scheduler):
    """The digits example (digits.yaml, webdataset) built once per session by `datapipe build
    --json` in process on the session's cluster, into PROJECT/store. Read it, never change it
    (DigitsBuild.copy makes a copy to change)."""
    from helpers.cli import datapipe_in_process, on_session_cluster
    from helpers.digits import DigitsBuild

    project = copy_digits(
        tmp_path_factory.mktemp("digits-built"),
        "digits.yaml",
        "digits_tfrecord.yaml",
        "digits_code.py",
    )
    out = datapipe_in_process(
        "build",
        "digits.yaml",
        "--out",
        "store",
        *on_session_cluster(scheduler),
        "--json",
        cwd=project,
    )
    assert out.returncode == 0, out.stderr
    return DigitsBuild(project, project / "store", json.loads(out.stdout.strip().splitlines()[-1]))
