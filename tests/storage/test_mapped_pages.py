"""A mapped file's pages: mapped into the process in one call before a read all over it."""

import mmap
import resource
import sys

import numpy as np
import pytest

from datapipe.storage.local import MADV_POPULATE_READ, map_file, populate_pages

PAGES = 2048


def faults_touching_every_page(buffer) -> int:
    """Minor page faults of reading one byte of every page of ``buffer``."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    int(np.frombuffer(buffer, dtype=np.uint8)[:: mmap.PAGESIZE].sum())
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(sys.platform != "linux", reason="MADV_POPULATE_READ is Linux's")
def test_populated_pages_are_read_without_a_fault_each(tmp_path):
    path = tmp_path / "ids.bin"
    path.write_bytes(np.arange(PAGES * mmap.PAGESIZE // 8, dtype=np.int64).tobytes())
    plain, populated = map_file(path), map_file(path)
    try:
        populated.madvise(MADV_POPULATE_READ)
    except OSError:
        pytest.skip("this kernel is older than Linux 5.14: populate_pages does nothing here")
    populated.close()
    populated = map_file(path)
    populate_pages(populated)
    # the kernel maps up to 16 pages around a fault: a plain read still faults PAGES / 16 times
    assert faults_touching_every_page(populated) < faults_touching_every_page(plain) // 4
