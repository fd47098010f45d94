"""The 'tokenize' stage: a text column encoded into token ids with a Hugging Face tokenizer.json.

The file is read once, where the build starts (``read_tokenizer``): its bytes, sha256, the size of
its vocabulary and the end- and beginning-of-text ids. The workers get those bytes with the job
and load each file once (keyed by its sha256). Encoding adds no special tokens
(``add_special_tokens=False``): datapipe puts the BOS and EOS ids around each document itself, so
the ids do not depend on the post-processor template a tokenizer.json configures.

Special tokens, when ``eos_token``/``bos_token`` do not name them: the first name of
``EOS_NAMES`` (``BOS_NAMES``) that is one of the file's special added tokens.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from datapipe.builder.config import LoadedPipeline, stage_path
from datapipe.builder.config_parts import TokenizeArgs
from datapipe.errors import ConfigError, DatapipeError, did_you_mean
from datapipe.formats.tokens.megatron import token_dtype
from datapipe.storage.fs import filesystem, read_bytes

TOKENS = "tokens"  # the column the stage adds
EOS_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "[EOS]")
BOS_NAMES = ("<|begin_of_text|>", "<s>", "<bos>", "<|bos|>", "[BOS]", "<|startoftext|>")
# An encode_batch call's documents: at most BATCH, and no more text than BATCH_CHARS (one longer
# document goes alone). Its Encodings (ids, masks, offsets, token strings) take ~20-30 bytes a
# character until the call returns: this bounds them, whatever the documents' lengths.
BATCH = 1024
BATCH_CHARS = 1 << 20
ENCODING_BYTES_PER_CHAR = 32
TOKENIZER_EXPANSION = 16  # a loaded tokenizer's memory over its tokenizer.json's bytes
# A longer document is encoded in pieces of about this many characters where that gives the same
# ids (``splittable``): one call on a 5 MB document holds some 500 MB of the library's memory.
LONG_CHARS = 1 << 18
# before a space or newline between two non-space characters: a pre-token starts there
_CUT = re.compile(r"(?<=\S)(?=[ \n]\S)")


@dataclass(frozen=True)
class TokenizerFile:
    """A tokenize stage's tokenizer.json as the build uses it: read once, sent to the workers."""

    data: bytes
    sha256: str
    shown: str  # the path as the pipeline file names it, for messages
    vocab_size: int  # the largest id plus one: what the ids' dtype must hold
    eos_id: int | None  # None where the stage does not append one (eos: false)
    bos_id: int | None

    @property
    def dtype(self) -> np.dtype:
        """The ids' dtype: uint16 up to 65,536 ids, else int32 (``token_dtype``)."""
        return token_dtype(self.vocab_size)


def tokenizers_version() -> str:
    """The installed tokenizers library's version (a lineage input: it can change the ids)."""
    from importlib import metadata

    return metadata.version("tokenizers")


def _load(data: bytes) -> Any:
    # Rayon's pool would start as many threads as the machine has cores inside every worker
    # process, beside Dask's own threads; serial encoding also keeps it out of forked children.
    # tokenizers reads the variable at each batch, so setting it before the first one is enough.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        from tokenizers import Tokenizer
    except ImportError:  # the workers' environment lacks what the pipeline file's had
        raise ConfigError(
            "the tokenize stage needs the tokenizers library where the build runs; install it "
            "with pip install 'datapipe[text]' (or pip install 'tokenizers>=0.20') on every worker"
        ) from None

    return Tokenizer.from_str(data.decode("utf-8"))


def read_tokenizer(
    args: TokenizeArgs, label: str, base_dir: str, storage_options: Mapping[str, Any] | None = None
) -> TokenizerFile:
    """The stage's tokenizer file, checked: ConfigError naming it when it cannot be read, is not a
    tokenizer.json, or lacks a special token the stage adds."""
    path = args.tokenizer
    url = path if "://" in path or os.path.isabs(path) else os.path.join(base_dir, path)
    try:
        fs, where = filesystem(url, dict(storage_options or {}))
        data = read_bytes(fs, where)
    except (DatapipeError, OSError) as e:
        raise ConfigError(
            f"{label}.tokenizer: cannot read {path!r} ({e}); give the path of a Hugging Face "
            "tokenizer.json, relative to the pipeline file, or an fsspec URL"
        ) from None
    try:
        spec = json.loads(data)
        if not isinstance(spec, dict) or "model" not in spec:
            raise ValueError("a tokenizer.json is a JSON object with a 'model'")
        tokenizer = _load(data)
    except ConfigError:
        raise
    except Exception as e:  # json, UTF-8 and the Rust parser's errors alike
        raise ConfigError(
            f"{label}.tokenizer: {path} is not a Hugging Face tokenizer.json ({str(e)[:200]}); "
            "save one with tokenizers' Tokenizer.save or a transformers tokenizer's save_pretrained"
        ) from None
    specials = [t["content"] for t in spec.get("added_tokens") or () if t.get("special")]
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    where = (label, path, specials, vocab)
    return TokenizerFile(
        data,
        hashlib.sha256(data).hexdigest(),
        path,
        max(vocab.values(), default=0) + 1,
        _special_id(args.eos, args.eos_token, EOS_NAMES, "eos_token", where),
        _special_id(args.bos, args.bos_token, BOS_NAMES, "bos_token", where),
    )


def _special_id(
    wanted: bool,
    name: str | None,
    names: tuple[str, ...],
    key: str,
    where: tuple[str, str, list[str], dict[str, int]],
) -> int | None:
    """The id of the special token ``key`` names (or the first of ``names`` among the file's
    special tokens); None when the stage does not add it."""
    label, path, specials, vocab = where
    if not wanted:
        return None
    listed = f"special tokens: {', '.join(specials) or 'none'}"
    if name is None:
        name = next((n for n in names if n in specials), None)
        if name is None:
            raise ConfigError(
                f"{label}.{key}: {path} does not say which token is its {key[:3].upper()} "
                f"({listed}); name it with {key}"
            )
    if name not in vocab:
        raise ConfigError(
            f"{label}.{key}: {name!r} is not in the vocabulary of {path}"
            f"{did_you_mean([name], specials)} ({listed})"
        )
    return vocab[name]


_LOADED: dict[str, Any] = {}  # sha256 -> Tokenizer, once per worker process


def _tokenizer(file: TokenizerFile) -> Any:
    tokenizer = _LOADED.get(file.sha256)
    if tokenizer is None:
        tokenizer = _LOADED[file.sha256] = _load(file.data)
    return tokenizer


def _text_column(frame: pd.DataFrame, field: str, label: str) -> pd.Series:
    if field not in frame.columns:
        raise ConfigError(
            f"{label}.field: no column {field!r}{did_you_mean([field], frame.columns)} (columns: "
            f"{', '.join(map(str, frame.columns))}); name the column that holds the text"
        )
    column = frame[field]
    dtype = column.dtype
    if pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_datetime64_any_dtype(dtype):
        raise ConfigError(
            f"{label}.field: column {field!r} holds {dtype}, not text; name the column that holds "
            "the text"
        )
    return column


def _text(value: Any, field: str) -> str:
    """The document's text; ValueError saying why it has none."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"no text: {field!r} is null")
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            why = f"{e.reason} at byte {e.start}"
            raise ValueError(f"{field!r} is not UTF-8 text ({why})") from None
    raise ValueError(f"{field!r} holds {type(value).__name__}, not text")


def tokenize(
    frame: pd.DataFrame, args: TokenizeArgs, label: str, file: TokenizerFile
) -> tuple[pd.DataFrame, int, dict[Any, str]]:
    """The rows with the column ``tokens`` added (the text column kept), how many were dropped
    for having fewer than ``min_tokens`` ids, and row id -> reason for the rows without text."""
    if not len(frame):  # an empty partition may have no columns at all
        return frame.assign(**{TOKENS: pd.Series([], frame.index, object)}), 0, {}
    column = _text_column(frame, args.field, label)
    positions, texts, reasons = [], [], {}
    for i, (row, value) in enumerate(zip(frame.index, column.array, strict=True)):
        try:
            texts.append(_text(value, args.field))
            positions.append(i)
        except ValueError as e:
            reasons[row] = str(e)
    ids = encode(texts, file)
    long_enough = np.fromiter((len(a) >= args.min_tokens for a in ids), bool, len(ids))
    kept = frame.iloc[np.asarray(positions, dtype=np.int64)[long_enough]]
    tokens = pd.Series([a for a, k in zip(ids, long_enough, strict=True) if k], kept.index, object)
    return kept.assign(**{TOKENS: tokens}), int((~long_enough).sum()), reasons


def encode(texts: list[str], file: TokenizerFile) -> list[np.ndarray]:
    """Each text's ids as an array of the file's dtype, between the BOS and EOS ids it adds."""
    tokenizer, dtype = _tokenizer(file), file.dtype
    head = [file.bos_id] if file.bos_id is not None else []
    tail = [file.eos_id] if file.eos_id is not None else []
    batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    cut = splittable(tokenizer)
    pieces, owner = [], []
    for i, text in enumerate(texts):
        for piece in cut_long(text) if cut and len(text) > LONG_CHARS else (text,):
            pieces.append(piece)
            owner.append(i)
    encoded = [
        np.array(encoding.ids, dtype=dtype)
        for part in batches(pieces)
        for encoding in batch(part, add_special_tokens=False)
    ]
    ends = np.array(head, dtype=dtype), np.array(tail, dtype=dtype)
    ids: list[list[np.ndarray]] = [[] for _ in texts]
    for i, array in zip(owner, encoded, strict=True):
        ids[i].append(array)
    return [np.concatenate([ends[0], *parts, ends[1]]) for parts in ids]


def splittable(tokenizer: Any) -> bool:
    """Whether a text cut before a space or newline between two non-space characters encodes to
    the same ids piece by piece: a byte-level pre-tokenizer that splits by its regex (no pre-token
    holds a space but at its start, nor a newline after a non-space one) without a prefix space,
    and no normalizer."""
    pre = tokenizer.pre_tokenizer
    return (
        type(pre).__name__ == "ByteLevel"
        and bool(pre.use_regex)
        and not pre.add_prefix_space
        and tokenizer.normalizer is None
    )


def cut_long(text: str, size: int = LONG_CHARS) -> list[str]:
    """``text`` in pieces of about ``size`` characters, each cut before a space or newline between
    two non-space characters (where there is none, the rest stays whole)."""
    out, start = [], 0
    while len(text) - start > size:
        found = _CUT.search(text, start + size)
        if found is None:
            break
        out.append(text[start : found.start()])
        start = found.start()
    out.append(text[start:])
    return out


def batches(texts: list[str]) -> Iterator[list[str]]:
    """``texts`` cut into runs of at most BATCH documents and BATCH_CHARS characters."""
    start = chars = 0
    for i, text in enumerate(texts):
        if i > start and (i - start == BATCH or chars + len(text) > BATCH_CHARS):
            yield texts[start:i]
            start, chars = i, 0
        chars += len(text)
    if start < len(texts):
        yield texts[start:]


def tokenize_memory(file: TokenizerFile | None) -> int:
    """Bytes a worker needs beside its partitions for the stage: the loaded tokenizer and one
    batch's Encodings (0 without the stage)."""
    if file is None:
        return 0
    return TOKENIZER_EXPANSION * len(file.data) + ENCODING_BYTES_PER_CHAR * BATCH_CHARS


def pipeline_tokenizer(
    loaded: LoadedPipeline, storage_options: Mapping[str, Any] | None = None
) -> TokenizerFile | None:
    """The tokenize stage's file, read and checked before any cluster starts (None without the
    stage); a ConfigError names the stage's line."""
    for i, stage in enumerate(loaded.pipeline.stages):
        if stage.kind == "tokenize":
            options = {**loaded.pipeline.source.options.get("storage_options", {})}
            options.update(storage_options or {})
            label = stage_path(i, stage.kind)
            try:
                return read_tokenizer(stage.args, label, loaded.base_dir, options)
            except ConfigError as e:
                raise loaded.located(e) from None
    return None
