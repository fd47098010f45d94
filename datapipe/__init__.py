"""datapipe: build, version and stream sharded datasets for training.

Importing this package stays light (no torch, dask or s3fs); each subpackage pulls in what it needs.
``datapipe.open_dataset``, ``Dataset``, ``Loader``, ``mix``, ``Mix``, ``audit``, ``image`` and
``pack`` load on first use.
"""

from typing import Any

__version__ = "0.3.0"

_LAZY = {
    "open_dataset": ("datapipe.loader.dataset", "open_dataset"),
    "Dataset": ("datapipe.loader.dataset", "Dataset"),
    "Loader": ("datapipe.loader.loader", "Loader"),
    "mix": ("datapipe.loader.mix", "mix"),
    "Mix": ("datapipe.loader.mix", "Mix"),
    "audit": ("datapipe.loader.audit", "audit"),
    "image": ("datapipe.loader.images.spec", "image"),
    "pack": ("datapipe.loader.tokens.pack", "pack"),
}
__all__ = [
    "Dataset",
    "Loader",
    "Mix",
    "__version__",
    "audit",
    "image",
    "mix",
    "open_dataset",
    "pack",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'datapipe' has no attribute {name!r}")
