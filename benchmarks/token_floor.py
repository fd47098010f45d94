"""W5's floor: ``Tokenizer.encode_batch`` of every document in one process on one thread, in MB of
text (UTF-8) per second (issue 31).

Each measurement runs in a fresh interpreter with the environment it is given, because Rayon
sizes its pool from the environment once, at the first parallel call:

    python -m benchmarks.token_floor TOKENIZER JSONL_DIR [--max-bytes N] [--fast]

reads the documents into memory (not timed), loads the tokenizer (not timed), then times
``encode_batch`` of batches of ``BATCH`` documents and reading each Encoding's ids (what any
caller needs), and prints one JSON line: bytes, documents, tokens, seconds, CPU seconds, and the
process's thread count after the encode (Rayon's pool, when there is one, stays). CPU seconds over
wall seconds near 1 is one thread; near the core count is Rayon's pool at work. ``--fast`` times
``encode_batch_fast`` instead (no offsets), for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

BATCH = 1000  # documents per encode_batch call (~15 MB of W5)

# The settings compared: none (the library's default), and each of the two knobs that may make it
# one thread; the floor is measured under ONE_THREAD.
ENVS = {
    "default": {},
    "TOKENIZERS_PARALLELISM=false": {"TOKENIZERS_PARALLELISM": "false"},
    "RAYON_NUM_THREADS=1": {"RAYON_NUM_THREADS": "1"},
}
ONE_THREAD = {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1"}
KNOBS = ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS", "RAYON_RS_NUM_CPUS")


def load_texts(directory: str, max_bytes: int | None = None) -> list[str]:
    """The documents' texts in order, the first ``max_bytes`` of text (whole documents) if given."""
    from benchmarks.text import parts

    out, total = [], 0
    for path in parts(directory):
        with open(path, encoding="utf-8") as f:
            for line in f:
                text = json.loads(line)["text"]
                out.append(text)
                total += len(text.encode())
                if max_bytes and total >= max_bytes:
                    return out
    return out


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def encode(tokenizer: str, texts: list[str], fast: bool = False) -> dict:
    """Time the encode of ``texts`` in this process."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer)
    call = tok.encode_batch_fast if fast else tok.encode_batch
    threads_before = _threads()
    tokens = 0
    cpu, t = time.process_time(), time.perf_counter()
    for i in range(0, len(texts), BATCH):
        for e in call(texts[i : i + BATCH], add_special_tokens=False):
            tokens += len(e.ids)
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    return {
        "bytes": sum(len(s.encode()) for s in texts),
        "documents": len(texts),
        "tokens": tokens,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "threads_before": threads_before,
        "threads_after": _threads(),
        "fast": fast,
    }


def measure(
    tokenizer: str,
    directory: str,
    env: dict[str, str],
    max_bytes: int | None = None,
    fast: bool = False,
    timeout: float = 1800,
) -> dict:
    """One floor measurement in a fresh interpreter whose environment is ours with the tokenizer
    knobs removed, then ``env``."""
    cmd = [sys.executable, "-m", "benchmarks.token_floor", tokenizer, directory]
    cmd += ["--max-bytes", str(max_bytes)] if max_bytes else []
    cmd += ["--fast"] if fast else []
    base = {k: v for k, v in os.environ.items() if k not in KNOBS}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        cmd, env={**base, **env}, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "env": env}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tokenizer", help="a tokenizer.json")
    parser.add_argument("directory", help="W5's folder of JSONL parts")
    parser.add_argument("--max-bytes", type=int, help="only the first N bytes of text")
    parser.add_argument("--fast", action="store_true", help="encode_batch_fast (no offsets)")
    args = parser.parse_args()
    texts = load_texts(args.directory, args.max_bytes)
    print(json.dumps(encode(args.tokenizer, texts, args.fast)))


if __name__ == "__main__":
    main()
