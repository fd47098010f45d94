"""Listing a source: its path as a URL, the files it names in sorted order, with sizes and etags or
stamps."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from datapipe.builder.source.base import InputFile, SourceSpec
from datapipe.errors import NotFoundError
from datapipe.storage.fs import filesystem, is_local, protocol_of

_GLOB = set("*?[")


def source_url(source: SourceSpec, base_dir: str) -> str:
    """The source path as a URL: relative local paths are taken from the pipeline file's
    directory."""
    if "://" in source.path or os.path.isabs(source.path):
        return source.path
    return os.path.join(base_dir, source.path)


def _label(path: str, url: str, fs: Any, base_dir: str) -> str:
    if is_local(fs):
        rel = os.path.relpath(path, base_dir)
        return rel if not rel.startswith("..") else path
    return f"{protocol_of(fs)}://{path}"


def stamp_of(st: os.stat_result) -> str:
    """A local file's identity and state: device, inode, size, mtime and ctime in ns
    (``known_hashes`` reads it)."""
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def list_files(
    source: SourceSpec, base_dir: str, storage_options: Mapping[str, Any]
) -> tuple[Any, list[InputFile]]:
    """The source's files in sorted order, with sizes; a clear error when nothing matches."""
    url = source_url(source, base_dir)
    fs, path = filesystem(url, dict(storage_options))
    if _GLOB & set(path):
        paths = fs.glob(path)
    elif fs.isdir(path):
        paths = fs.find(path)
    elif fs.exists(path):
        paths = [path]
    else:
        raise NotFoundError(f"source.path: {source.path!r} does not exist (looked for {url})")
    infos = []
    for p in sorted(paths):
        info = fs.info(p)
        if info.get("type") == "directory":
            continue
        if is_local(fs):
            etag, stamp = None, stamp_of(os.stat(p))
        else:
            etag, stamp = (
                str(info.get("ETag") or info.get("etag") or info.get("checksum") or ""),
                None,
            )
        infos.append(
            InputFile(
                p, _label(p, url, fs, base_dir), int(info.get("size") or 0), etag or None, stamp
            )
        )
    if not infos:
        raise NotFoundError(f"source.path: {source.path!r} matches no files (looked for {url})")
    return fs, infos
