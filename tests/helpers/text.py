"""Text for the tokenize tests: documents generated from a seed, a tiny BPE trained on them."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np

WORDS = (
    "the data pipe reads rows cleans them and writes shards of tokens for models that learn "
    "language from text every document keeps its key héllo wörld naïve café 東京 ✓"
).split()


def documents(n: int, seed: int = 0, max_words: int = 60) -> list[str]:
    """``n`` documents of 1 to ``max_words`` words (the first few short, one very long)."""
    rng = random.Random(seed)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, max_words))) for _ in range(n)]
    if n > 3:
        docs[1] = ""  # no tokens of its own: dropped under min_tokens: 2 with eos
        docs[2] = " ".join(WORDS * 200)  # kept whole
    return docs


def train_tokenizer(path: Path, vocab_size: int = 400, specials=("<|endoftext|>", "<s>")) -> Path:
    """A byte-level BPE of about ``vocab_size`` ids trained on ``documents``, saved as ``path``."""
    # serial, as the stage encodes: no Rayon pool in the test process
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents(300, seed=1), trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path


def expected_ids(path: Path, text: str, bos: bool = False, eos: bool = True) -> list[int]:
    """``text`` encoded directly with tokenizers, with the ids of <s> and <|endoftext|> around."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    head = [tokenizer.token_to_id("<s>")] if bos else []
    tail = [tokenizer.token_to_id("<|endoftext|>")] if eos else []
    return head + ids + tail


def write_jsonl(path: Path, docs: list[str], start: int = 0) -> None:
    """``docs`` as JSONL rows {id, text, url}, ids d00000 on from ``start``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for i, text in enumerate(docs, start):
            row = {"id": f"d{i:05d}", "text": text, "url": f"https://example.org/{i}"}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def npy(value: bytes) -> np.ndarray:
    """A .npy field's array."""
    import io

    return np.load(io.BytesIO(value))


def build_web(root: Path, docs: list[str], start: int = 0, **stage):
    """A token version of ``docs`` (keys d00000 on from ``start``) built by a tokenize stage with
    a BPE trained here (ROOT/tokenizers/bpe.json, trained once), in shards of at most 4KB, into
    the store ROOT/store, in this process; returns its manifest."""
    import json as json_

    from datapipe.builder.config import load_pipeline
    from datapipe.builder.in_process import InProcessClient
    from datapipe.builder.run import Execution, build
    from datapipe.versioning.store import Store

    tokenizer = root / "tokenizers" / "bpe.json"
    if not tokenizer.exists():
        train_tokenizer(tokenizer)
    for old in (root / "raw").glob("web-*.jsonl"):
        old.unlink()
    write_jsonl(root / "raw" / "web-0.jsonl", docs, start)
    args = {"tokenizer": "tokenizers/bpe.json", **stage}
    (root / "pipeline.yaml").write_text(
        "name: web\nsource: {path: raw/web-*.jsonl, format: jsonl}\nstages:\n"
        f"  - tokenize: {json_.dumps(args)}\n"
        "sample: {key: id, fields: {tokens: tokens, url: url}}\n"
        "shards: {format: tokens, max_bytes: 4KB}\n"
    )
    store = Store(str(root / "store"))
    execution = Execution(client=InProcessClient(threads=2))
    return build(load_pipeline(root / "pipeline.yaml"), store, execution=execution).manifest
