"""Build: pipeline config, the source, passes on Dask, shard plan, write and commit (`datapipe
build`)."""
