"""Big payloads copied into a batch by several threads (loader/copies.py): the same bytes as one
thread copies, in a forked child as well, through the Loader; DataLoader workers copy on their own
thread."""

import multiprocessing
import threading

import numpy as np
import pytest

import datapipe
from datapipe.formats.registry import get_format
from datapipe.loader import copies
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store


def jobs_over_three_sources(seed: int = 0) -> tuple[list[copies.Copies], int, list[bytes]]:
    """Three 'shards' of payloads with junk between them; batch positions interleave the shards (as
    shuffled)."""
    rng = np.random.default_rng(seed)
    payloads = [rng.bytes(int(rng.integers(1, 5000))) for _ in range(60)]
    order = rng.permutation(len(payloads))
    starts = np.concatenate([[0], np.cumsum([len(payloads[i]) for i in order])[:-1]])
    position = {int(i): int(s) for i, s in zip(order, starts, strict=True)}
    jobs = []
    for part in np.array_split(np.arange(len(payloads)), 3):
        blob, offsets = bytearray(), []
        for i in part.tolist():
            blob += rng.bytes(int(rng.integers(0, 300)))
            offsets.append(len(blob))
            blob += payloads[i]
        jobs.append(
            (
                memoryview(bytes(blob)),
                [position[i] for i in part.tolist()],
                offsets,
                [len(payloads[i]) for i in part.tolist()],
            )
        )
    return jobs, sum(map(len, payloads)), [payloads[i] for i in order]


@pytest.fixture
def three_threads(monkeypatch):
    # small test batches take the threaded path too
    monkeypatch.setattr(copies, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(copies, "_threads", 3)


def test_threads_copy_what_one_thread_copies(three_threads):
    jobs, total, in_batch_order = jobs_over_three_sources()
    threaded = np.zeros(total, dtype=np.uint8)
    copies.copy_payloads(threaded, jobs)
    assert [t for t in threading.enumerate() if t.name.startswith("datapipe-copy")]
    assert threaded.tobytes() == b"".join(in_batch_order)
    copies.set_threads(1)
    alone = np.zeros(total, dtype=np.uint8)
    copies.copy_payloads(alone, jobs)
    assert alone.tobytes() == threaded.tobytes()


def _copy_in_child(result) -> None:
    jobs, total, in_batch_order = jobs_over_three_sources(seed=1)
    out = np.zeros(total, dtype=np.uint8)
    copies.copy_payloads(out, jobs)
    result.put(out.tobytes() == b"".join(in_batch_order))


def test_a_forked_child_copies_with_threads_of_its_own(three_threads):
    """The parent's pool threads do not exist in a forked child: work handed to them would wait
    forever."""
    jobs, total, _ = jobs_over_three_sources()
    copies.copy_payloads(np.zeros(total, dtype=np.uint8), jobs)  # the parent's pool is started
    context = multiprocessing.get_context("fork")
    result = context.Queue()
    child = context.Process(target=_copy_in_child, args=(result,))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0 and result.get(timeout=5) is True


def threads_in_this_process(payload: bytes) -> int:
    return copies.threads()


def test_loader_batches_copied_by_threads_and_workers_copy_alone(tmp_path, three_threads):
    rng = np.random.default_rng(2)
    samples = [
        {"__key__": f"s{i:04d}", "cls": str(i % 10).encode(), "bin": rng.bytes(20_000 + 37 * i)}
        for i in range(90)
    ]
    writer = Store(str(tmp_path)).begin("big")
    fmt = get_format("webdataset")
    shards = [writer.write_shard(k, samples[k * 30 : (k + 1) * 30], fmt) for k in range(3)]
    writer.commit(
        Manifest(
            name="big",
            shard_format="webdataset",
            fields={"cls": "int", "bin": "bytes"},
            shards=tuple(shards),
        )
    )
    url = f"{tmp_path}/big"
    by_key = {s["__key__"]: s["bin"] for s in samples}
    seen = 0
    for batch in datapipe.Loader(
        url, batch_size=16, num_workers=0, seed=3, block_shards=3, decode={"bin": "ragged"}
    ):
        data, offsets = (np.asarray(v) for v in batch["bin"])
        for key, a, b in zip(batch["__key__"], offsets[:-1], offsets[1:], strict=True):
            assert data[a:b].tobytes() == by_key[key]
            seen += 1
    assert seen == 80  # 90 samples, 5 full batches of 16
    loader = datapipe.Loader(
        url, batch_size=16, num_workers=2, decode={"cls": threads_in_this_process}
    )
    in_workers = [v for batch in loader for v in batch["cls"]]
    assert in_workers == [1] * 80
    assert copies.threads() == 3  # the training process keeps its threads
