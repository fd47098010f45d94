"""Token versions as fixed-length rows: the pack settings, the packing of a window of shards, and
the rows a Loader deals out in place of samples."""
