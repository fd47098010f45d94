"""A build's inputs, found before any cluster starts: the source, the user code and the parent."""

from __future__ import annotations

import time
from dataclasses import dataclass

from datapipe.builder.config import LoadedPipeline
from datapipe.builder.execution import Execution
from datapipe.builder.incremental import state_key
from datapipe.builder.lineage import checked_code
from datapipe.builder.reuse import Parent, read_parent
from datapipe.builder.source.base import Source
from datapipe.builder.source.opening import open_source
from datapipe.builder.tokenize_stage import TokenizerFile, pipeline_tokenizer
from datapipe.versioning.manifest import CodeRef, SourceFile
from datapipe.versioning.store import Store


@dataclass(frozen=True)
class Inputs:
    """What a build starts from: each part found once, and a mistake in any of them (a missing
    source, a map stage that fails to import) an error before a cluster starts."""

    source: Source  # listed and sampled for its schema, not yet partitioned
    code: tuple[CodeRef, ...]  # every module a map stage calls, with its sha256
    key: str  # what a parent's partition must share to carry over (``incremental.state_key``)
    parent: Parent
    known: dict[int, SourceFile]  # file index -> the hash the parent's records vouch for
    listed_ns: int  # when the source was listed (``known_hashes``)
    # for a rebuild, the source bytes its parent's state does not cover (``Parent.unread_bytes``)
    unread_bytes: int | None
    tokenizer: TokenizerFile | None = None  # the tokenize stage's file, read and checked

    @property
    def code_hashes(self) -> dict[str, str]:
        """module -> sha256 of its file, of every module a map stage calls."""
        return {ref.module: ref.sha256 for ref in self.code}

    @property
    def source_bytes(self) -> int:
        """The size of the source's files."""
        return sum(f.size for f in self.source.files)


def find_inputs(loaded: LoadedPipeline, store: Store, execution: Execution) -> Inputs:
    """Open the source of ``loaded``, check the code its map stages call, and find the parent
    version in ``store`` with what of it this build's source and code can take."""
    pipeline, listed_ns = loaded.pipeline, time.time_ns()
    source = open_source(pipeline.source, loaded.base_dir, execution.storage_options)
    code = checked_code(loaded)
    tokenizer = pipeline_tokenizer(loaded, execution.storage_options)
    key = state_key(pipeline, {ref.module: ref.sha256 for ref in code}, source, tokenizer)
    parent = read_parent(store, pipeline.name, key)
    known = parent.trusted_hashes(source.files, execution.rehash)
    shuffled = pipeline.shards.shuffle_seed is not None
    unread = parent.unread_bytes(source.files, known, shuffled)
    return Inputs(source, code, key, parent, known, listed_ns, unread, tokenizer)
