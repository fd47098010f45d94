"""The two workloads, generated in memory from a seed: W1 (many small samples) and W2 (fewer large
ones).

A sample is a WebDataset-style dict ``{"__key__": "s0000123", "cls": b"7", "bin": payload}``;
the peers that want typed columns get ``int(cls)`` (``labels``) and the key as a str.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_CHUNK = 1000  # samples generated per numpy call (bounds the transient copy of W2)


@dataclass(frozen=True)
class Workload:
    """``samples`` samples, each a string key, an int label 0-9 and ``payload`` random bytes."""

    name: str
    samples: int
    payload: int
    seed: int

    def describe(self) -> str:
        size = f"{self.payload // 1024} KiB" if self.payload >= 1024 else f"{self.payload} B"
        return f"{self.name}: {self.samples:,} samples x {size} payload + int label"


def workloads(quick: bool) -> list[Workload]:
    """W1 and W2 at full size, or a tenth of it with ``quick``."""
    scale = 10 if quick else 1
    return [
        Workload("w1", 200_000 // scale, 1024, seed=1),
        Workload("w2", 10_000 // scale, 100 * 1024, seed=2),
    ]


@dataclass
class Data:
    """The samples of a workload, in memory."""

    workload: Workload
    samples: list[dict]
    labels: list[int]

    @property
    def payload_bytes(self) -> int:
        """Bytes of every field's payload (bin + the ASCII label); keys and framing not counted."""
        return sum(len(s["bin"]) + len(s["cls"]) for s in self.samples)


def generate(workload: Workload) -> Data:
    """The workload's samples; the same bytes on every run and machine (numpy's PCG64 with the
    seed)."""
    rng = np.random.default_rng(workload.seed)
    labels = rng.integers(0, 10, workload.samples).tolist()
    samples: list[dict] = []
    for start in range(0, workload.samples, _CHUNK):
        count = min(_CHUNK, workload.samples - start)
        blob = rng.bytes(count * workload.payload)
        for j in range(count):
            i = start + j
            samples.append(
                {
                    "__key__": f"s{i:07d}",
                    "cls": str(labels[i]).encode(),
                    "bin": blob[j * workload.payload : (j + 1) * workload.payload],
                }
            )
    return Data(workload, samples, labels)


def write_parquet(data: Data, path: str, row_group_bytes: int = 16 * 10**6) -> None:
    """The samples as a Parquet table (key: string, label: int64, payload: binary), ~16 MB row
    groups.

    Row groups are the build's partitions, the unit its workers share: 16 MB gives W1 13 of them,
    which 2 workers split 7:6 (64 MB row groups gave 4, split 3:1).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "key": pa.array([s["__key__"] for s in data.samples], pa.string()),
            "label": pa.array(data.labels, pa.int64()),
            "payload": pa.array([s["bin"] for s in data.samples], pa.binary()),
        }
    )
    rows = max(1, row_group_bytes // (data.workload.payload + 16))
    pq.write_table(table, path, row_group_size=rows, compression="none")
