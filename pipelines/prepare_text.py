"""Write the text example's input for pipelines/text.yaml: docstrings as JSONL, and a tokenizer.

pipelines/raw/text/docs-N.jsonl: the docstrings of the Python standard library's modules, classes
and functions (real text that every machine has), one document a row ({id, text, module}), in
files of about 500 documents; pipelines/raw/text/bpe.json: a byte-level BPE of 2,000 ids trained
on them with `tokenizers`, with <|endoftext|> as its end-of-text token.

    python pipelines/prepare_text.py [--out DIR] [--modules N]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
PER_FILE = 500


def docstrings(modules: int) -> list[tuple[str, str]]:
    """(where, docstring) of the first ``modules`` standard library modules, by file name."""
    stdlib = sysconfig.get_paths()["stdlib"]
    names = sorted(n for n in os.listdir(stdlib) if n.endswith(".py") and not n.startswith("_"))
    out = []
    for name in names[:modules]:
        try:
            with open(os.path.join(stdlib, name), encoding="utf-8") as f:
                tree = ast.parse(f.read())
        except (SyntaxError, UnicodeDecodeError):  # a test fixture that is not Python 3
            continue
        module = name[: -len(".py")]
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef):
                text = ast.get_docstring(node)
                if text:
                    out.append((f"{module}.{getattr(node, 'name', '')}".rstrip("."), text))
    return out


def write_documents(out: str, docs: list[tuple[str, str]]) -> None:
    """``docs`` as JSONL files of PER_FILE rows."""
    os.makedirs(out, exist_ok=True)
    for start in range(0, len(docs), PER_FILE):
        with open(os.path.join(out, f"docs-{start // PER_FILE:03d}.jsonl"), "w") as f:
            for i, (module, text) in enumerate(docs[start : start + PER_FILE], start):
                row = {"id": f"doc-{i:06d}", "text": text, "module": module}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")


def train(path: str, texts: list[str]) -> None:
    """A byte-level BPE of 2,000 ids trained on ``texts``, saved as ``path``."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the same merges on any core count
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.save(path)


def main() -> None:
    """Parse the arguments and write the documents and the tokenizer."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "raw", "text"))
    parser.add_argument("--modules", type=int, default=40, help="standard library modules read")
    args = parser.parse_args()
    docs = docstrings(args.modules)
    write_documents(args.out, docs)
    train(os.path.join(args.out, "bpe.json"), [text for _, text in docs])
    print(f"{len(docs)} documents and bpe.json in {args.out}")


if __name__ == "__main__":
    main()
