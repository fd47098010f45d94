"""Shard formats (WebDataset tar, TFRecord): writers, readers and their shared random-access
index."""
