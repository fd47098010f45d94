"""Byte access to shards and datasets: local files now, fsspec URLs as the store grows."""
