"""WebDataset tar shards: deterministic ustar writer, mmap reader, header scanner for foreign
tars."""
