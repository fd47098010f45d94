"""datapipe: build, version and stream sharded datasets for training.

Importing this package stays light (no torch, dask or s3fs); each subpackage pulls in what it needs.
"""

__version__ = "0.1.0"
