"""Shard formats (WebDataset tar, TFRecord, Megatron-Core tokens): writers, readers, their index."""
