"""The peer side of the near-duplicate benchmark: datatrove's MinHash deduplication run end to end
(MinhashDedupSignature, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter, each stage a
LocalPipelineExecutor as in datatrove's examples/minhash_deduplication.py) on a folder of JSONL
files, timed stage by stage, with the ids of the documents it removed read back from the filter's
exclusion writer. Configured like datapipe's near_dedupe (``shingle`` words a shingle, ``bands``
bands of ``rows`` values, ``seed``), it still differs in what it compares: datatrove lower-cases
the text, turns punctuation into spaces, every number into "0" and strips diacritics
(simplify_text) before it splits words, where datapipe splits the lower-cased text at ``\\w+``
as it is; its word tokenizer for language="eng" is spaCy's blank English one, and spaCy is not
installed here (nor nltk), so this passes datatrove a tokenizer of its own, ``\\w+`` over the
simplified text (so "foo_bar" is two words here, one in datapipe); a document of fewer than
``shingle`` words has no shingle and is never removed (datapipe makes one shingle of its words);
shingles are hashed with datatrove's default (64-bit xxhash; sha1 where xxhash is not installed) and
permuted as (a x + b) mod 2^61 - 1, a band matches only when all its ``rows`` values are equal,
and every cluster keeps one document whatever the exact similarity of its pairs (no check of the
candidates). Its console log is cut to errors; each task's full log is under workdir/logs.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

STAGES = ("signatures", "buckets", "clusters", "filter")
OUTPUTS = ("signatures", "buckets", "remove_ids", "removed", "kept", "logs")  # under workdir
WORD = re.compile(r"\w+")


class WordRegexTokenizer:
    """Words of datatrove's simplified text at ``\\w+`` (a WordTokenizer by registration)."""

    def word_tokenize(self, text: str) -> list[str]:
        """The ``\\w+`` runs of ``text``."""
        return WORD.findall(text)

    def sent_tokenize(self, text: str) -> list[str]:
        """The whole text as one sentence (MinHash never splits sentences)."""
        return [text] if text.strip() else []

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        """The span of the whole text as one sentence."""
        return [(0, len(text))] if text.strip() else []


def _quiet_logs() -> None:
    """Cut datatrove's console log in this process to errors (task log files stay complete) and
    hide its progress bar."""
    import datatrove.executor.base as base
    import datatrove.pipeline.dedup.minhash as minhash
    import datatrove.utils.logging as dlog
    from loguru import logger
    from tqdm import tqdm

    if getattr(dlog, "_near_quiet", False):
        return
    add_task_logger = dlog.add_task_logger

    def quiet_task_logger(logging_dir: Any, rank: int, local_rank: int = 0, node_rank: int = -1):
        """datatrove's task logger as for a task of local rank > 0: console at ERROR."""
        return add_task_logger(logging_dir, rank, max(local_rank, 1), node_rank=node_rank)

    def quiet_default_logger() -> None:
        """datatrove's default console logger at ERROR."""
        logger.remove()
        logger.add(sys.stderr, level="ERROR")

    base.add_task_logger = quiet_task_logger
    minhash.tqdm = partial(tqdm, disable=True)  # the cluster stage's progress bar
    dlog.setup_default_logger = quiet_default_logger
    dlog._near_quiet = True
    quiet_default_logger()


def _quieted() -> QuietStep:
    """A QuietStep, after quieting this process's datatrove log (runs where one is unpickled)."""
    _quiet_logs()
    return QuietStep()


class QuietStep:
    """A pipeline step that passes its input on; unpickling it in a worker quiets that worker."""

    def __reduce__(self) -> tuple:
        """Unpickle through _quieted, before the worker sets up its task's log."""
        return (_quieted, ())

    def __repr__(self) -> str:
        """Its line in datatrove's pipeline log."""
        return "QuietStep (console log at ERROR)"

    def __call__(self, data: Any, rank: int = 0, world_size: int = 1) -> Any:
        """The input, unchanged."""
        return data


def _lines(folder: Path) -> Iterator[str]:
    """The non-empty lines of the (gzip or plain) files under ``folder``."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        with path.open("rb") as head:
            packed = head.read(2) == b"\x1f\x8b"
        opened = gzip.open(path, "rt", encoding="utf-8") if packed else path.open(encoding="utf-8")
        with opened as f:
            yield from (line for line in f if line.strip())


def run_datatrove(
    jsonl_dir: str,
    workdir: str,
    tasks: int = 2,
    bands: int = 14,
    rows: int = 8,
    shingle: int = 5,
    seed: int = 1,
) -> dict:
    """datatrove's four MinHash stages on jsonl_dir/*.jsonl, their outputs under workdir."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.word_tokenizers import WordTokenizer

    _quiet_logs()
    WordTokenizer.register(WordRegexTokenizer)
    work = Path(workdir)
    for name in OUTPUTS:  # a rerun must not find the last run's files (other task counts)
        shutil.rmtree(work / name, ignore_errors=True)
    config = MinhashConfig(
        n_grams=shingle,
        num_buckets=bands,
        hashes_per_bucket=rows,
        seed=seed,
    )
    if importlib.util.find_spec("xxhash") is None:  # datatrove's default hash needs xxhash
        config = replace(config, hash_config=HashConfig(precision=64, hash_fc="sha1"))

    def reader() -> JsonlReader:
        """The input, split into the same tasks in the signature and the filter stage."""
        return JsonlReader(jsonl_dir, text_key="text", id_key="id", glob_pattern="*.jsonl")

    def executor(name: str, pipeline: list, count: int, workers: int) -> LocalPipelineExecutor:
        """One stage: ``count`` tasks on ``workers`` processes, its logs under workdir/logs."""
        return LocalPipelineExecutor(
            pipeline=[QuietStep(), *pipeline],
            tasks=count,
            workers=workers,
            logging_dir=str(work / "logs" / name),
            skip_completed=False,
        )

    stages = {
        "signatures": executor(
            "signatures",
            [
                reader(),
                MinhashDedupSignature(
                    output_folder=str(work / "signatures"),
                    config=config,
                    language=WordRegexTokenizer(),
                ),
            ],
            tasks,
            tasks,
        ),
        "buckets": executor(
            "buckets",
            [
                MinhashDedupBuckets(
                    input_folder=str(work / "signatures"),
                    output_folder=str(work / "buckets"),
                    config=config,
                )
            ],
            bands,
            tasks,
        ),
        "clusters": executor(
            "clusters",
            [
                MinhashDedupCluster(
                    input_folder=str(work / "buckets"),
                    output_folder=str(work / "remove_ids"),
                    config=config,
                )
            ],
            1,
            1,
        ),
        "filter": executor(
            "filter",
            [
                reader(),
                MinhashDedupFilter(
                    input_folder=str(work / "remove_ids"),
                    exclusion_writer=JsonlWriter(str(work / "removed")),
                ),
                JsonlWriter(str(work / "kept")),
            ],
            tasks,
            tasks,
        ),
    }
    per_stage: dict[str, float] = {}
    read = 0
    for name in STAGES:
        start = time.perf_counter()
        stats = stages[name].run()
        per_stage[name] = time.perf_counter() - start
        if name == "filter":  # the documents its reader read
            read = int(next(s for s in stats.stats if "READER" in s.name).stats["documents"].total)
    removed = sorted(json.loads(line)["id"] for line in _lines(work / "removed"))
    kept = sum(1 for _ in _lines(work / "kept"))
    return {  # seconds: the four stages' wall time together, imports and reading back excluded
        "seconds": sum(per_stage.values()),
        "seconds_per_stage": per_stage,
        "documents": read,
        "removed": removed,
        "kept": kept,
    }


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="datatrove MinHash dedup of a JSONL folder")
    parser.add_argument("jsonl_dir")
    parser.add_argument("workdir")
    args = parser.parse_args()
    result = run_datatrove(args.jsonl_dir, args.workdir)
    result["removed"] = len(result["removed"])
    print(json.dumps(result, indent=2))
