"""One W6 measurement in this fresh interpreter: import the tool, make its loader, read rows of
tokens and touch every row (issue 32).

    python -m benchmarks.pack_measure SPEC_JSON

SPEC_JSON names the ``tool`` (a key of ``TOOLS``) and what its opener takes (``url``, ``mode``,
``workers``, ``shards``, ...); ``rows`` caps the rows read (null: one whole epoch); the tool
"plans" times ``pack_ours.plans`` instead. It prints
one line ``RESULT {json}``: the seconds of the imports, of the start (the opener's call to the
first batch in hand: workers started, indices built), of the rest of the read, the rows and the
rows after the first batch, the peak RSS of this process and of its largest child (DataLoader
workers), and a checksum of what was touched.

Every batch is touched the same way whatever the tool: each 2-D array or tensor of it (token
ids, labels, positions, masks) has its first and last column summed, so every row of every
field is read and nothing lazy stays unread.
"""

from __future__ import annotations

import gc
import json
import resource
import sys
import time
from collections.abc import Callable

from benchmarks import pack_floor, pack_ours, pack_peers

# tool -> (imports, opener: spec -> iterable of batches)
TOOLS: dict[str, tuple[Callable[[], None], Callable[[dict], object]]] = {
    "datapipe": (pack_ours.imports, pack_ours.loader),
    "datapipe-mix": (pack_ours.imports, pack_ours.mix_loader),
    "megatron": (pack_peers.megatron_imports, pack_peers.megatron_loader),
    "litdata": (pack_peers.litdata_imports, pack_peers.litdata_loader),
    "floor": (pack_floor.imports, pack_floor.batches),
}


def touch(batch) -> tuple[int, int]:
    """(rows, sum of the first and last column of every 2-D field) of a batch: a dict of arrays
    or tensors, or one array or tensor."""
    fields = batch.values() if isinstance(batch, dict) else [batch]
    rows = total = 0
    for value in fields:
        if getattr(value, "ndim", 0) == 2:
            rows = int(value.shape[0])
            total += int(value[:, 0].sum()) + int(value[:, -1].sum())
    return rows, total


def read(spec: dict) -> dict:
    """Time the tool's imports, its start to the first batch, and the read of the rest."""
    t0 = time.perf_counter()
    imports, opener = TOOLS[spec["tool"]]
    imports()
    t1 = time.perf_counter()
    batches = iter(opener(spec))
    rows, checksum = touch(next(batches))
    t2 = time.perf_counter()
    first_rows, cap = rows, spec.get("rows")
    for batch in batches:
        n, s = touch(batch)
        rows, checksum = rows + n, checksum + s
        if cap and rows >= cap:
            break
    t3 = time.perf_counter()
    del batches  # a DataLoader's workers stop here, outside the timings
    gc.collect()
    return {
        "tool": spec["tool"],
        "import_seconds": t1 - t0,
        "start_seconds": t2 - t1,
        "read_seconds": t3 - t2,
        "rows": rows,
        "rows_after_first": rows - first_rows,
        "checksum": checksum,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "child_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def main() -> None:
    spec = json.loads(sys.argv[1])
    if spec["tool"] == "plans":  # plan making, timed inside
        result = pack_ours.plans(spec["url"], spec["length"])
    else:
        result = read(spec)
    sys.stdout.flush()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
