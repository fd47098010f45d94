"""W5's peers: datatrove's tokenization pipeline and LitData's ``optimize`` with a tokenizer, each
on W5's JSONL parts with the same tokenizer.json, 2 workers, the way their documentation shows
(issue 31).

- datatrove: ``LocalPipelineExecutor([JsonlReader(DIR), DocumentTokenizer(OUT,
  tokenizer_name_or_path=TOKENIZER, eos_token="<|endoftext|>", shuffle_documents=False)],
  tasks=2, workers=2)``: its own
  token files (``*.ds``: ids back to back, uint16 or uint32 by the vocabulary, an index of document
  ends and a metadata file). Its default shuffles each file's documents, a second pass over the
  tokens written; datapipe's build does not shuffle, so neither does this.
- LitData: ``optimize(fn, inputs=PARTS, chunk_size=2049 * 8012, item_loader=TokensLoader(),
  num_workers=2)`` where ``fn`` reads a part line by line and yields each document's ids with the
  end-of-text id appended as a numpy array (uint16 or uint32), as its LLM pre-training example does.

Each runs in a fresh interpreter (``benchmarks.token_run`` starts it) with one Rayon thread per
process, the budget datapipe's stage and the floor get; the call is timed after the imports:

    python -m benchmarks.token_peers datatrove|litdata TOKENIZER JSONL_DIR OUT

prints one JSON line: seconds (the call), CPU seconds (the process's own and, sampled, every
process below it), the tokens it wrote (from its own files: the check that it saw every document),
the bytes it left and the peak RSS of the process and of its largest worker.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import sys
import threading
import time
from functools import partial

import numpy as np

from benchmarks.bpe import EOT
from benchmarks.text import parts

WORKERS = 2
LITDATA_CHUNK_TOKENS = 2049 * 8012  # LitData's example: 8,012 blocks of 2,048 + 1 tokens


def _dtype(tok):
    return np.uint16 if tok.get_vocab_size() <= 2**16 else np.uint32


def datatrove_write(tokenizer: str, directory: str, out: str) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    LocalPipelineExecutor(
        pipeline=[
            JsonlReader(directory, glob_pattern="*.jsonl", text_key="text", id_key="id"),
            DocumentTokenizer(
                output_folder=os.path.join(out, "tokens"),
                tokenizer_name_or_path=tokenizer,
                eos_token=EOT,
                shuffle_documents=False,
            ),
        ],
        tasks=WORKERS,
        workers=WORKERS,
        logging_dir=os.path.join(out, "logs"),
        skip_completed=False,
    ).run()


def datatrove_tokens(out: str, token_bytes: int) -> int:
    files = glob.glob(os.path.join(out, "tokens", "*.ds"))
    return sum(os.path.getsize(f) for f in files) // token_bytes


def _tokenize_file(path: str, tokenizer, eot: int, dtype):
    with open(path, encoding="utf-8") as f:
        for line in f:
            ids = tokenizer.encode(json.loads(line)["text"]).ids
            ids.append(eot)
            yield np.array(ids, dtype=dtype)


def litdata_write(tokenizer: str, directory: str, out: str) -> None:
    from litdata import TokensLoader, optimize
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer)
    optimize(
        fn=partial(_tokenize_file, tokenizer=tok, eot=tok.token_to_id(EOT), dtype=_dtype(tok)),
        inputs=parts(directory),
        output_dir=os.path.join(out, "tokens"),
        chunk_size=LITDATA_CHUNK_TOKENS,
        item_loader=TokensLoader(),
        num_workers=WORKERS,
    )


def litdata_tokens(out: str, token_bytes: int) -> int:
    with open(os.path.join(out, "tokens", "index.json")) as f:
        return sum(c["dim"] for c in json.load(f)["chunks"])


PEERS = {
    "datatrove": (datatrove_write, datatrove_tokens),
    "litdata": (litdata_write, litdata_tokens),
}
LABELS = {"datatrove": "datatrove", "litdata": "LitData"}


def _disk(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path) for n in names)


class _Descendants:
    """CPU seconds and peak RSS of every process below this one, sampled every ``PERIOD`` s.

    getrusage(RUSAGE_CHILDREN) counts only children this process waits for: datatrove starts its
    workers from a forkserver, whose children it never sees (LitData forks its own)."""

    PERIOD = 0.1

    def __init__(self) -> None:
        self.cpu: dict[int, float] = {}
        self.rss: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(self.PERIOD):
            for p in me.children(recursive=True):
                try:
                    with p.oneshot():
                        t = p.cpu_times()
                        self.cpu[p.pid] = t.user + t.system
                        self.rss[p.pid] = max(self.rss.get(p.pid, 0), p.memory_info().rss)
                except psutil.Error:  # gone between the listing and the read
                    pass

    def __enter__(self) -> _Descendants:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _own_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def run(peer: str, tokenizer: str, directory: str, out: str) -> dict:
    """Tokenize W5 with ``peer`` into ``out`` (made empty first) in this process."""
    import shutil

    from tokenizers import Tokenizer

    write, count = PEERS[peer]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    token_bytes = np.dtype(_dtype(Tokenizer.from_file(tokenizer))).itemsize
    cpu = _own_cpu()
    with _Descendants() as below:
        t = time.perf_counter()
        write(tokenizer, directory, out)
        seconds = time.perf_counter() - t
    return {
        "seconds": seconds,
        # this process's, and its workers' (and forkserver's) as last sampled
        "cpu_seconds": _own_cpu() - cpu + sum(below.cpu.values()),
        "tokens": count(out, token_bytes),
        "disk_bytes": _disk(os.path.join(out, "tokens")),
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_rss_mb": max(below.rss.values(), default=0) / 2**20,
        "processes_below": len(below.cpu),
    }


def _import(peer: str) -> None:
    """The peer's modules, before the clock starts."""
    import tokenizers  # noqa: F401

    if peer == "datatrove":
        from datatrove.executor import LocalPipelineExecutor  # noqa: F401
        from datatrove.pipeline.tokens import DocumentTokenizer  # noqa: F401
    else:
        from litdata import optimize  # noqa: F401


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("tokenizer")
    parser.add_argument("directory")
    parser.add_argument("out")
    args = parser.parse_args()
    _import(args.peer)
    result = run(args.peer, args.tokenizer, args.directory, args.out)
    sys.stdout.flush()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
