"""A model, not a measurement: tokenizing 1 TB of text on 100 workers, from W5's measured floor
(issue 31).

    python -m benchmarks.token_model benchmarks/results/results-w5.json

The measured inputs are W5's one-thread ``encode_batch`` rate and bytes per token of each
tokenizer; everything else is an assumption named below or a figure of ``benchmarks.build_model``
(the scheduler's cost per task and the client's plan per sample, measured on the 2-core VM for W3).
It prints, per tokenizer, the time the tokenizing takes and the count behind each thing that could
break first: source listing, scheduler tasks, output objects, S3 requests, the index in memory.
"""

from __future__ import annotations

import json
import math
import sys

from benchmarks.build_model import MOVE_THREADS, PLAN_BYTES_PER_SAMPLE

TEXT_BYTES = 10**12
WORKERS = 100
TARGET = 0.85  # issue 31: a build reaches at least 0.85x the floor for its workers
BLOCKSIZE = 64 << 20  # datapipe's default partition of a JSONL source
SHARD_BYTES = 256 * 10**6  # issue 31's example: shards: {max_bytes: 256MB}
OBJECTS_PER_SHARD = 4  # NAME.bin, NAME.idx, datapipe's index, the other fields
JSONL_FILE_BYTES = 10**9  # assumed: the source as 1 GB JSONL files
WEB_DOC_BYTES = 3_000  # assumed: mean document of filtered web text (W5's files average ~15 KB)
LIST_PAGE, LIST_SECONDS = 1000, 0.05  # S3 ListObjectsV2: keys a page; assumed seconds a page
TASK_SECONDS = 1.8e-3  # Dask scheduler per task, measured on the 2-core VM (LOG, 2026-12-01)
UNIQUE_PER_ROW = 411e-9  # the client's key dedupe per row at 2M rows (LOG, 2026-12-01)
PART_BYTES = 50 * 2**20  # s3fs's multipart block
COPY_MB_S = 64  # assumed: one server-side copy, MB/s (build_model's 1 s per 64 MB)
S3_PUT_PER_S = 3500  # S3's documented PUT/COPY/POST/DELETE rate per prefix


def model(rate_mb_s: float, bytes_per_token: float, token_bytes: int) -> dict[str, float]:
    """The figures for one tokenizer: ``rate_mb_s`` is the one-thread floor."""
    tokenize = TEXT_BYTES / (WORKERS * rate_mb_s * 1e6 * TARGET)
    tokens = TEXT_BYTES / bytes_per_token
    out_bytes = tokens * token_bytes
    docs = TEXT_BYTES / WEB_DOC_BYTES
    partitions = math.ceil(TEXT_BYTES / BLOCKSIZE)
    shards = math.ceil(out_bytes / SHARD_BYTES)
    hash_groups = math.ceil(TEXT_BYTES / (256 << 20))
    # build_model's count, unshuffled: read+measure and write per partition, pieces, shards
    tasks = 2 * partitions + (partitions + shards) + shards + hash_groups
    return {
        "tokenize_s": tokenize,
        "tokens": tokens,
        "out_gb": out_bytes / 1e9,
        "documents": docs,
        "list_jsonl_s": math.ceil(TEXT_BYTES / JSONL_FILE_BYTES / LIST_PAGE) * LIST_SECONDS,
        "list_files_s": math.ceil(docs / LIST_PAGE) * LIST_SECONDS,
        "tasks": tasks,
        "scheduler_s": tasks * TASK_SECONDS,
        "shards": shards,
        "objects": shards * OBJECTS_PER_SHARD,
        "put_per_s": (out_bytes / PART_BYTES + shards * OBJECTS_PER_SHARD) / tokenize,
        "commit_s": out_bytes / (MOVE_THREADS * COPY_MB_S * 1e6),
        "client_gb": docs * (PLAN_BYTES_PER_SAMPLE + 16) / 1e9,
        "dedupe_s": docs * UNIQUE_PER_ROW * math.log2(docs) / math.log2(2_000_000),
        "docs_per_shard": docs / shards,
    }


def table(results: dict) -> str:
    """The model's table for the tokenizers of a results-w5.json."""
    w = results["workloads"]["w5"]
    rows = []
    for name, t in sorted(w["tokenizers"].items(), key=lambda kv: kv[1]["vocab_size"]):
        floor = w["runs"][name]["floor"]
        rates = sorted(r["bytes"] / r["seconds"] / 1e6 for r in floor)
        rate = rates[len(rates) // 2]
        bpt = floor[0]["bytes"] / floor[0]["tokens"]
        width = 2 if t["vocab_size"] <= 2**16 else 4
        m = model(rate, bpt, width)
        rows.append(
            f"| {name} | {rate:.2f} MB/s, {bpt:.2f} B/token | {m['tokenize_s'] / 3600:.1f} h "
            f"| {m['tokens'] / 1e9:.0f}B tokens, {m['out_gb']:.0f} GB | {m['tasks']:,} tasks, "
            f"{m['scheduler_s']:.0f} s | {m['shards']:,} shards, {m['objects']:,} objects | "
            f"{m['put_per_s']:.0f} PUT/s; commit {m['commit_s']:.0f} s | "
            f"{m['client_gb']:.0f} GB, dedupe {m['dedupe_s']:.0f} s |"
        )
    m = model(1.0, 4.0, 2)
    head = (
        "| tokenizer | floor, 1 thread | tokenize, 100 workers at 0.85x | output | scheduler "
        "| shards (256 MB) | S3 writes | client plan (3 KB documents) |\n" + "|" + "---|" * 8
    )
    listing = (
        f"\nListing: {TEXT_BYTES // JSONL_FILE_BYTES:,} JSONL files of 1 GB take "
        f"{m['list_jsonl_s']:.2f} s; one document a file ({m['documents']:.2e} objects) "
        f"{m['list_files_s']:,.0f} s of sequential LIST pages."
    )
    return head + "\n" + "\n".join(rows) + "\n" + listing


def main() -> None:
    with open(sys.argv[1]) as f:
        print(table(json.load(f)))


if __name__ == "__main__":
    main()
