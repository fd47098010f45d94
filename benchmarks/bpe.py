"""W5's two tokenizers: byte-level BPEs of 50,000 ids (token ids fit uint16) and 100,000 ids
(uint32), trained on W5 with Hugging Face ``tokenizers`` and saved as tokenizer.json (issue 31).

GPT-2's recipe: the ByteLevel pre-tokenizer (no prefix space) and decoder, the 256 byte symbols as
the initial alphabet, and ``<|endoftext|>`` as the one special token (id 0). No post-processor:
whoever tokenizes appends the end-of-text id itself, as datapipe's stage will. Trained on all of
W5 (``TRAIN_EVERY`` = 1: on the 2-core VM the 100,000-id one takes ~45 s and 1.3 GB for 314 MB),
once: ``DIR/bpe-50k.json`` and ``bpe-100k.json``, with ``DIR/bpe.json`` recording the spec (W5's
digest among it) and each file's sha256; files whose spec matches are reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

EOT = "<|endoftext|>"
VOCABS = {"bpe-50k": 50_000, "bpe-100k": 100_000}
TRAIN_EVERY = 1  # every document; a larger W5 may want every k-th
FORMAT = 1


def train(texts: list[str], vocab_size: int):
    """A byte-level BPE of ``vocab_size`` ids trained on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer, length=len(texts))
    return tok


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def tokenizers_for(w5_sha256: str, jsonl: str, directory: str, log=print) -> dict:
    """{name: {"path", "vocab_size", "sha256", "train_seconds", ...}}, trained on W5's parts in
    ``jsonl`` into ``directory`` unless files of the same spec are there.

    The training runs in a fresh interpreter (``python -m benchmarks.bpe``): it holds all of W5 and
    takes GBs, and Linux carries a process's peak RSS across exec, so in the benchmark's own
    process it would become every later measurement's peak."""
    spec = _spec(w5_sha256)
    cached = _cached(directory, spec)
    if cached:
        return cached
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    subprocess.run(
        [sys.executable, "-m", "benchmarks.bpe", w5_sha256, jsonl, directory], env=env, check=True
    )
    trained = _cached(directory, spec)
    assert trained, f"benchmarks.bpe left no tokenizers of this spec in {directory}"
    for name, t in trained.items():
        log(f"  trained {name}: {t['vocab_size']:,} ids in {t['train_seconds']:.0f} s")
    return trained


def _spec(w5_sha256: str) -> dict:
    import tokenizers

    return {
        "format": FORMAT,
        "w5": w5_sha256,
        "train_every": TRAIN_EVERY,
        "vocabs": VOCABS,
        "tokenizers": tokenizers.__version__,
    }


def _cached(directory: str, spec: dict) -> dict | None:
    meta = os.path.join(directory, "bpe.json")
    if not os.path.exists(meta):
        return None
    with open(meta) as f:
        old = json.load(f)
    if old.get("spec") == spec and all(
        os.path.exists(t["path"]) and _sha256(t["path"]) == t["sha256"]
        for t in old["tokenizers"].values()
    ):
        return old["tokenizers"]
    return None


def train_all(w5_sha256: str, texts: list[str], directory: str) -> None:
    """Train every tokenizer of VOCABS on ``texts`` into ``directory``, with ``bpe.json``."""

    os.makedirs(directory, exist_ok=True)
    subset = texts[::TRAIN_EVERY]
    out = {}
    for name, vocab in VOCABS.items():
        t = time.perf_counter()
        tok = train(subset, vocab)
        path = os.path.join(directory, f"{name}.json")
        tok.save(path)
        seconds = time.perf_counter() - t
        out[name] = {
            "path": path,
            "vocab_size": tok.get_vocab_size(),
            "eot_id": tok.token_to_id(EOT),
            "sha256": _sha256(path),
            "train_seconds": seconds,
            "train_documents": len(subset),
            "train_bytes": sum(len(s.encode()) for s in subset),
        }
    with open(os.path.join(directory, "bpe.json"), "w") as f:
        json.dump({"spec": _spec(w5_sha256), "tokenizers": out}, f, indent=1)


def main() -> None:
    from benchmarks.text import texts

    w5_sha256, jsonl, directory = sys.argv[1:4]
    train_all(w5_sha256, texts(jsonl), directory)


if __name__ == "__main__":
    main()
