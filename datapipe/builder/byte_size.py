"""Byte sizes: moved to :mod:`datapipe.storage.byte_size`, below every layer that reads or shows
them; this name stays for cli/build.py until it imports from there."""

from datapipe.storage.byte_size import SIZE_PATTERN, format_size, parse_size

__all__ = ["SIZE_PATTERN", "format_size", "parse_size"]
