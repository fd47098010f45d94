"""Token shards: Megatron-Core indexed datasets (``NAME.bin``, ``NAME.idx``) and their documents."""
