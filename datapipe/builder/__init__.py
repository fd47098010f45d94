"""Build: pipeline config, Dask stages, shard plan, run."""
