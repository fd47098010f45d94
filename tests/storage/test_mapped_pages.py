"""A mapped file's pages: mapped into the process in one call before a read all over it."""

import sys

import numpy as np
import pytest

from datapipe.storage.local import MADV_POPULATE_READ, map_file, populate_pages

SIZE = 8 << 20


def resident_bytes(buffer) -> int:
    """The bytes of ``buffer``'s mapping resident in this process (its Rss in /proc/self/smaps)."""
    start = np.frombuffer(buffer, dtype=np.uint8).ctypes.data
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= start < hi
            elif inside and head == "Rss:":
                return int(line.split()[1]) * 1024
    raise AssertionError("the mapping is not in /proc/self/smaps")


@pytest.mark.skipif(sys.platform != "linux", reason="MADV_POPULATE_READ is Linux's")
def test_populated_pages_are_mapped_before_they_are_read(tmp_path):
    path = tmp_path / "ids.bin"
    path.write_bytes(np.arange(SIZE // 8, dtype=np.int64).tobytes())
    probe = map_file(path)
    try:
        probe.madvise(MADV_POPULATE_READ)
    except OSError:
        pytest.skip("this kernel is older than Linux 5.14: populate_pages does nothing here")
    finally:
        probe.close()
    plain, populated = map_file(path), map_file(path)
    populate_pages(populated)
    assert resident_bytes(populated) == SIZE
    assert resident_bytes(plain) < SIZE // 8  # nothing read yet: at most what a fault maps around
