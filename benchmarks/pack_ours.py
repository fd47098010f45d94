"""W6's datapipe side: packed rows of W5's token version through ``datapipe.Loader``, a mix of
three token datasets, and the making of best-fit window plans (issue 32).

Each opener runs inside a measurement process (``benchmarks.pack_measure``) and returns an
iterable of batches; the process times the call and every batch. ``spec`` is the measurement's
JSON: ``url`` (the version), ``mode`` ("concat" or "best-fit"), ``workers``, ``length``,
``batch`` and, for the mix, ``weights`` and ``epoch_rows``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from typing import Any

SEED = 0
MIX_WEIGHTS = {"a": 0.5, "b": 0.3, "c": 0.2}


def imports() -> None:
    """What a training script imports before it makes its Loader."""
    import torch  # noqa: F401

    import datapipe  # noqa: F401
    from datapipe.loader import loader  # noqa: F401
    from datapipe.loader.tokens import packed_set  # noqa: F401


def _pack(spec: dict) -> Any:
    import datapipe

    return datapipe.pack(length=spec["length"], mode=spec["mode"])


def loader(spec: dict) -> Iterable:
    """``datapipe.Loader(url, batch_size=8, pack=pack(length=4096, mode=MODE), num_workers=N,
    seed=0)``: shuffled rows of one token version."""
    import datapipe

    return datapipe.Loader(
        spec["url"],
        batch_size=spec["batch"],
        pack=_pack(spec),
        num_workers=spec["workers"],
        seed=SEED,
    )


def mix_loader(spec: dict) -> Iterable:
    """The same Loader over ``datapipe.mix`` of three sources at 0.5/0.3/0.2 (``spec["sources"]``,
    name -> URL), ``epoch_rows`` rows an epoch (one source's rows, so an epoch reads as many rows
    as the single dataset's)."""
    import datapipe

    data = datapipe.mix(
        spec["sources"], weights=spec.get("weights", MIX_WEIGHTS), epoch_samples=spec["epoch_rows"]
    )
    return datapipe.Loader(
        data,
        batch_size=spec["batch"],
        pack=_pack(spec),
        num_workers=spec["workers"],
        seed=SEED,
    )


def rows_of(url: str, length: int, mode: str = "concat") -> int:
    """Rows one epoch of the version packs into (what a Loader over it counts)."""
    import datapipe
    from datapipe.loader.tokens.packed_set import PackedSet

    ds = datapipe.open_dataset(url, lease_ttl=None)
    try:
        return len(PackedSet(ds, datapipe.pack(length=length, mode=mode)))
    finally:
        ds.close()


def plans(url: str, length: int, repeats: int = 3) -> dict:
    """Plan making: for each window of the version (4 shards, the Loader's default), the seconds
    of its documents in packing order (``PackedFiles.docs``) and of ``WindowPlan`` (the median of
    ``repeats``), best-fit and concat; rows per second of plan, the documents, pieces and the
    best-fit rows' fill (real tokens over row slots)."""
    import datapipe
    from datapipe.loader.tokens.packed_set import PackedSet
    from datapipe.loader.tokens.window import WindowPlan, row_count

    ds = datapipe.open_dataset(url, lease_ttl=None)
    out: dict[str, Any] = {"windows": []}
    try:
        for mode in ("best-fit", "concat"):
            pack = datapipe.pack(length=length, mode=mode)
            files = PackedSet(ds, pack, seed=SEED).files
            for w in range(len(files)):
                docs, docs_s = _timed(lambda files=files, w=w: files.docs(w), repeats)
                plan, plan_s = _timed(lambda d=docs, p=pack: WindowPlan(d, p), repeats)
                _, count_s = _timed(lambda d=docs, p=pack: row_count(d.length, p), repeats)
                tokens = int(docs.length.sum())
                out["windows"].append(
                    {
                        "mode": mode,
                        "window": w,
                        "documents": len(docs.length),
                        "tokens": tokens,
                        "rows": int(plan.rows),
                        "pieces": len(plan.table) if mode != "concat" else None,
                        "fill": tokens / max(1, plan.rows * length),
                        "docs_seconds": docs_s,
                        "plan_seconds": plan_s,
                        "row_count_seconds": count_s,
                    }
                )
    finally:
        ds.close()
    return out


def _timed(call, repeats: int) -> tuple[Any, float]:
    """(the last result, the median seconds of ``repeats`` calls)."""
    seconds, result = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - t)
    return result, statistics.median(seconds)
