"""A token version's documents as pages show them: decoded by the version's own tokenizer."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from datapipe.formats.tokens.writer import TOKENS
from datapipe.loader.dataset import Dataset
from datapipe.serve.samples import Field
from datapipe.storage.fs import read_bytes
from datapipe.versioning.layout import VERSIONS

INSTALL = "install tokenizers (pip install 'datapipe[text]') to see the text"


class Decoders:
    """Each token version's tokenizer, loaded once from the copy its directory keeps (the file
    that made its ids, whatever the pipeline's file says now)."""

    def __init__(self) -> None:
        self._loaded: dict[tuple[str, str], tuple[Any, str]] = {}
        self._lock = threading.Lock()  # pages run on several threads

    def tokenizer(self, ds: Dataset) -> tuple[Any, str]:
        """The version's ``tokenizers.Tokenizer`` and ''; or None and why its ids are shown."""
        key = (ds.name, ds.version)
        with self._lock:
            if key in self._loaded:
                return self._loaded[key]
        loaded = _load(ds)
        with self._lock:
            return self._loaded.setdefault(key, loaded)

    def field(self, ds: Dataset, ids: np.ndarray, limit: int) -> Field:
        """The ``tokens`` field of a document: its text decoded (special tokens shown, as the
        build added them), else its ids; cut to ``limit`` characters, with its token count."""
        tokenizer, why = self.tokenizer(ds)
        # a token is mostly a character or more: the first ``limit`` fill (or nearly) the limit
        head = ids[:limit].tolist()
        if tokenizer is None:
            text, kind = " ".join(map(str, head)), "ids"
        else:
            text, kind = tokenizer.decode(head, skip_special_tokens=False), "text"
        cut = len(ids) > limit or len(text) > limit
        return Field(TOKENS, kind, text[:limit], ids.nbytes, cut, tokens=len(ids), note=why)


def _load(ds: Dataset) -> tuple[Any, str]:
    ref = ds.manifest.lineage.tokenizer
    if ref is None:
        return None, "no tokenizer recorded with this version: its ids"
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None, INSTALL
    path = ds.store.path(ds.name, VERSIONS, ds.version, ref.file)
    try:
        data = read_bytes(ds.store.fs, path, ds.store.retry)
        return Tokenizer.from_str(data.decode("utf-8")), ""
    # the page still shows the ids: a missing copy (DatapipeError) or a bad file (tokenizers
    # raises plain Exceptions)
    except Exception as e:
        return None, f"{path}: cannot decode with it ({e}): its ids"
