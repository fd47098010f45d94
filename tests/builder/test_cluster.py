"""The embedded LocalCluster's workers come from a forkserver that lives only as long as the build."""

import multiprocessing
import os
from multiprocessing import forkserver

from tests.builder.test_build import people, write_people


def _environment_variable(name: str, queue) -> None:
    queue.put(os.environ.get(name))


def seen_by_a_forkserver_child(name: str) -> str | None:
    """The value of environment variable ``name`` in a process started from this process's forkserver."""
    context = multiprocessing.get_context("forkserver")
    queue = context.Queue()
    child = context.Process(target=_environment_variable, args=(name, queue))
    child.start()
    value = queue.get(timeout=60)
    child.join(timeout=60)
    return value


def test_forkserver_workers_build_the_same_version_and_leave_no_stale_server(project, dask_client, monkeypatch):
    # the case of a forkserver started before the build is the next test's; a test that ran earlier in this
    # process (DataLoader workers start from the forkserver) may have left one running
    if forkserver._forkserver._forkserver_pid is not None:
        forkserver._forkserver._stop()
    write_people(project)
    project.pipeline(people("4KB", "webdataset", "7"))
    spawned = project.build(client=dask_client)  # the session's cluster: Dask's default, spawned workers
    assert forkserver._forkserver._forkserver_pid is None
    forked = project.build(workers=1)  # the embedded cluster, its worker forked from a forkserver
    assert forked.manifest.version == spawned.manifest.version
    assert forkserver._forkserver._forkserver_pid is None  # stopped with the build
    # so a process started from a forkserver later (a Loader's workers on S3, the next build's workers)
    # sees the environment as it is now, not as it was when the build began
    monkeypatch.setenv("DATAPIPE_TEST_LATER", "set after the build")
    assert seen_by_a_forkserver_child("DATAPIPE_TEST_LATER") == "set after the build"


def test_a_forkserver_running_before_the_build_is_left_running(project):
    seen_by_a_forkserver_child("HOME")  # starts this process's forkserver
    running = forkserver._forkserver._forkserver_pid
    assert running is not None
    write_people(project, files=1, rows=50)
    project.pipeline(people("1MB", "webdataset", "null"))
    project.build(workers=1)
    assert forkserver._forkserver._forkserver_pid == running
    forkserver._forkserver._stop()
