"""The storage backends every conformance test runs against: local disk, fsspec's memory:// and S3
(moto)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from helpers.s3 import create_bucket, storage_options

from datapipe.storage.fs import filesystem


@dataclass(frozen=True)
class Backend:
    """A fresh, empty root on one backend: its URL and the storage options that reach it."""

    name: str
    url: str
    options: dict[str, Any]

    def fs(self) -> tuple[Any, str]:
        """The backend's filesystem and the root's path in it."""
        return filesystem(self.url, self.options)


@pytest.fixture(scope="module")
def s3_bucket(s3_server) -> str:
    bucket = f"conformance-{uuid.uuid4().hex[:12]}"
    create_bucket(s3_server, bucket)
    return bucket


@pytest.fixture(params=["local", pytest.param("memory"), pytest.param("s3", marks=pytest.mark.s3)])
def backend(request, tmp_path) -> Backend:
    root = uuid.uuid4().hex
    if request.param == "local":
        return Backend("local", str(tmp_path / root), {})
    if request.param == "memory":
        return Backend("memory", f"memory://conformance/{root}", {})
    server = request.getfixturevalue("s3_server")
    # the instance cache off: every test sees the bucket as it is, not an earlier test's listing
    options = {**storage_options(server), "skip_instance_cache": True, "use_listings_cache": False}
    return Backend("s3", f"s3://{request.getfixturevalue('s3_bucket')}/{root}", options)
