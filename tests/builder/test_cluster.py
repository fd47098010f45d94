"""The embedded LocalCluster's workers come from a forkserver that lives only as long as the
build."""

import multiprocessing
import os
from multiprocessing import forkserver

import pytest

from tests.builder.test_build import people, write_people


def _environment_variable(name: str, queue) -> None:
    queue.put(os.environ.get(name))


def seen_by_a_forkserver_child(name: str) -> str | None:
    """The value of environment variable ``name`` in a process started from this process's
    forkserver."""
    context = multiprocessing.get_context("forkserver")
    queue = context.Queue()
    child = context.Process(target=_environment_variable, args=(name, queue))
    child.start()
    value = queue.get(timeout=60)
    child.join(timeout=60)
    return value


def test_forkserver_workers_build_the_same_version_and_leave_no_stale_server(
    project, dask_client, monkeypatch
):
    # the case of a forkserver started before the build is the next test's; a test that ran earlier
    # in this process (DataLoader workers start from the forkserver) may have left one running
    if forkserver._forkserver._forkserver_pid is not None:
        forkserver._forkserver._stop()
    import distributed.utils

    # as in a fresh process
    monkeypatch.setattr(distributed.utils, "_forkserver_preload_set", False)
    preload = list(forkserver._forkserver._preload_modules)
    write_people(project)
    project.pipeline(people("4KB", "webdataset", "7"))
    # the session's cluster: Dask's default, spawned workers
    spawned = project.build(client=dask_client)
    assert forkserver._forkserver._forkserver_pid is None
    forked = project.build(workers=1)  # the embedded cluster, its worker forked from a forkserver
    assert forked.manifest.version == spawned.manifest.version
    assert forkserver._forkserver._forkserver_pid is None  # stopped with the build
    # not the list Dask's cluster start set
    assert forkserver._forkserver._preload_modules == preload
    # so a process started from a forkserver later (a Loader's workers on S3, the next build's
    # workers) sees the environment as it is now, not as it was when the build began
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


def test_a_scheduler_that_takes_the_connection_but_never_answers_is_an_error_not_a_wait():
    """distributed's Client alone waits for ever on such a peer (a stuck scheduler, another server's
    port)."""
    import socket

    from datapipe.builder.cluster import dask_client
    from datapipe.errors import ConfigError

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the connections; nothing ever answers them
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(
            ConfigError,
            match=r"accepted the connection but did not answer within 1\.5 s\); check "
            r"the address, or give a busy scheduler longer with --scheduler-timeout",
        ):
            with dask_client(None, address, scheduler_timeout=0.25):
                pass


@pytest.mark.parametrize("address", ["localhost", "nope://host:1"])
def test_a_scheduler_address_dask_cannot_parse_is_a_config_error(address):
    from datapipe.builder.cluster import dask_client
    from datapipe.errors import ConfigError

    with pytest.raises(
        ConfigError, match=rf"--scheduler {address}: not a Dask scheduler address .*tcp://HOST:8786"
    ):
        with dask_client(None, address, scheduler_timeout=1):
            pass


def _faults_of_a_reused_buffer() -> tuple[str | None, bool, int]:
    """In a Dask worker: the nanny's MALLOC_TRIM_THRESHOLD_, whether the thresholds were raised (now
    or by an earlier task), and the page faults of filling an 8 MiB buffer the second time it is
    allocated."""
    import resource

    from datapipe.builder import allocator

    allocator.fit_worker_thresholds()
    buffer = bytearray(8 << 20)  # freed, then allocated again: from the heap, or a fresh mapping
    del buffer
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    bytearray(8 << 20)
    return (
        os.environ.get("MALLOC_TRIM_THRESHOLD_"),
        allocator._done,
        resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before,
    )


def test_build_tasks_undo_the_nannys_trim_threshold_so_big_buffers_are_reused(dask_client):
    # the nanny's variable pins glibc's mmap threshold at 128 KiB: every 8 MiB buffer would fault
    # its 2,048 pages in again
    workers = list(dask_client.scheduler_info()["workers"])
    for trim, raised, faults in dask_client.gather(
        [dask_client.submit(_faults_of_a_reused_buffer, pure=False, workers=[w]) for w in workers]
    ):
        assert trim is not None and raised
        assert faults < 256


def _heap_kept_after_big_buffers() -> int:
    """In a Dask worker: the bytes of resident memory that three 24 MiB buffers, each freed before
    the next, leave behind."""
    import psutil

    from datapipe.builder import allocator

    allocator.fit_worker_thresholds()
    before = psutil.Process().memory_info().rss
    for _ in range(3):
        buffer = bytearray(24 << 20)
        del buffer
    return psutil.Process().memory_info().rss - before


def test_a_small_embedded_worker_gives_freed_buffers_back_as_the_nanny_would_have_it():
    # forked from the build's server, its allocator started before the nanny's variable was set:
    # with glibc's dynamic thresholds the second buffer would come from the heap, which keeps it
    from datapipe.builder.cluster import dask_client, worker_server

    with worker_server(), dask_client(1, processes=True, memory_limit=600 << 20) as client:
        kept = client.submit(_heap_kept_after_big_buffers, pure=False).result()
    assert kept < 4 << 20


def test_outside_a_dask_worker_the_allocator_is_left_alone(monkeypatch):
    from datapipe.builder import allocator

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    monkeypatch.setattr(allocator, "_done", False)
    assert not allocator.fit_worker_thresholds()
    assert not allocator._done


def test_a_small_worker_keeps_the_nannys_threshold():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, memory_limit="500MB", dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        trim, _, faults = client.submit(_faults_of_a_reused_buffer, pure=False).result()
    # a fresh mapping each time, as Dask wants it
    assert trim is not None and faults > 1000
