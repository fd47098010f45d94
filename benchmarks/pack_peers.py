"""W6's peers: Megatron-Core's GPTDataset over the token version's own shards, and LitData's
TokensLoader over its own optimized chunks of the same tokens (issue 32).

- Megatron-Core: ``BlendedMegatronDatasetBuilder(GPTDataset, [None] * 3, lambda: True,
  GPTDatasetConfig(blend=(PREFIXES, None), split="100,0,0", sequence_length=4096, ...)).build()``
  on CPU over the shards' ``NAME.bin``/``NAME.idx`` prefixes (datapipe writes Megatron's index
  beside every token shard), its index cache in a fresh folder each time (so its start-up builds
  the document, sample and shuffle indices, as a first run does), read through
  ``torch.utils.data.DataLoader(ds, batch_size=8, num_workers=N)``. Its config is the cheapest for
  it: no attention mask in the loader (``create_attention_mask=False``, what FlashAttention runs
  use), positions and masks not reset at documents (so they are computed once and cached).
  Megatron needs a tokenizer object for its end-of-document and pad ids: ``_Tokenizer`` is a stub.
- LitData: ``optimize(fn, inputs=RANGES, chunk_size=4097 * 4096, item_loader=TokensLoader(),
  num_workers=2)``, ``fn`` yielding each document's ids (the version's dtype) from the token
  shards, once into ``WORKDIR/litdata`` (``python -m benchmarks.pack_peers optimize OUT BIN...``);
  read as ``StreamingDataLoader(StreamingDataset(OUT, item_loader=TokensLoader(block_size=4097),
  shuffle=True, seed=0), batch_size=8, num_workers=N)``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator

DOCS_PER_INPUT = 1000  # documents per optimize input: the work two of its workers share


class _Tokenizer:
    """What Megatron-Core's datasets ask of a tokenizer: ``eod`` (and ``eos``), ``vocab_size``
    (None: the dtype comes from each ``.idx``) and ``unique_identifiers`` for its cache key; no
    ``pad``, so it pads with -1 (no row of one epoch of GPTDataset is padded)."""

    def __init__(self, eod: int) -> None:
        self.eod = self.eos = eod
        self.vocab_size = None
        self.unique_identifiers = {"class": "benchmarks.pack_peers._Tokenizer", "eod": eod}


def megatron_imports() -> None:
    """torch and Megatron-Core's dataset modules (it warns that Apex and TE are missing)."""
    import torch  # noqa: F401

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import (
            blended_megatron_dataset_builder,  # noqa: F401
            gpt_dataset,  # noqa: F401
        )


def megatron_dataset(prefixes: list[str], eod: int, length: int, cache: str):
    """The training split of GPTDataset (or its BlendedDataset over several prefixes), one epoch,
    seed 0."""
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    config = GPTDatasetConfig(
        random_seed=0,
        sequence_length=length,
        blend=(prefixes, None),
        split="100,0,0",
        path_to_cache=cache,
        tokenizer=_Tokenizer(eod),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train, _, _ = BlendedMegatronDatasetBuilder(
            GPTDataset, [None, None, None], lambda: True, config
        ).build()
    return train


def megatron_loader(spec: dict) -> Iterable:
    """``DataLoader(GPTDataset, batch_size=8, num_workers=N)`` over the version's shard prefixes,
    with a fresh index cache under ``spec["scratch"]``."""
    import torch

    os.makedirs(spec["scratch"], exist_ok=True)
    if not torch.distributed.is_initialized():  # its BlendedDataset (several shards) asks the rank
        torch.distributed.init_process_group(
            "gloo", init_method=f"file://{spec['scratch']}/pg-{os.getpid()}", rank=0, world_size=1
        )
    cache = tempfile.mkdtemp(prefix="megatron-cache-", dir=spec["scratch"])
    prefixes = [p[: -len(".bin")] for p in spec["shards"]]
    ds = megatron_dataset(prefixes, spec["eos"], spec["length"], cache)
    return torch.utils.data.DataLoader(
        ds, batch_size=spec["batch"], num_workers=spec["workers"], drop_last=True
    )


def litdata_imports() -> None:
    """torch and LitData's streaming classes."""
    import torch  # noqa: F401
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader  # noqa: F401


def litdata_loader(spec: dict) -> Iterable:
    """``StreamingDataLoader(StreamingDataset(DIR, item_loader=TokensLoader(block_size=L + 1),
    shuffle=True, seed=0), batch_size=8, num_workers=N)``."""
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader

    ds = StreamingDataset(
        spec["litdata"],
        item_loader=TokensLoader(block_size=spec["length"] + 1),
        shuffle=True,
        seed=0,
    )
    return StreamingDataLoader(
        ds, batch_size=spec["batch"], num_workers=spec["workers"], drop_last=True
    )


def _documents(item: tuple[str, int, int]) -> Iterator:
    """Each document's ids of shard ``path``, documents [first, end): the token arrays LitData
    writes."""
    from datapipe.formats.shards import open_shard

    path, first, end = item
    with open_shard(path) as reader:
        for i in range(first, end):
            yield reader.tokens(i).copy()


def optimize(out: str, shards: list[str], workers: int = 2) -> dict:
    """LitData's chunks of every document of ``shards``, in shard order, into ``out`` (emptied
    first); {seconds, tokens, chunks, disk_bytes}."""
    from litdata import TokensLoader
    from litdata import optimize as lit_optimize

    from datapipe.formats.shards import open_shard

    inputs = []
    for path in shards:
        with open_shard(path) as reader:
            n = len(reader)
        inputs += [(path, i, min(i + DOCS_PER_INPUT, n)) for i in range(0, n, DOCS_PER_INPUT)]
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    lit_optimize(
        fn=_documents,
        inputs=inputs,
        output_dir=out,
        chunk_size=4097 * 4096,
        item_loader=TokensLoader(),
        num_workers=workers,
        verbose=False,
    )
    seconds = time.perf_counter() - t
    with open(os.path.join(out, "index.json")) as f:
        chunks = json.load(f)["chunks"]
    disk = sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out))
    return {
        "seconds": seconds,
        "tokens": sum(c["dim"] for c in chunks),
        "chunks": len(chunks),
        "disk_bytes": disk,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["optimize"])
    parser.add_argument("out")
    parser.add_argument("shards", nargs="+")
    args = parser.parse_args()
    result = optimize(args.out, args.shards)
    sys.stdout.flush()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
