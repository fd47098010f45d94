"""Real DDP: torchrun with gloo on CPU, 2 ranks x 2 DataLoader workers; equal batches, exactly-once
coverage, resumption from a saved state with the same and with another world size."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sample_data import SIZES, make_dataset

SCRIPT = Path(__file__).with_name("ddp_run.py")
TORCHRUN = Path(sys.executable).with_name("torchrun")
TOTAL = sum(SIZES)


def torchrun(ranks: int, *args: str, killed: bool = False) -> list[dict]:
    out = Path(args[args.index("--out") + 1])
    proc = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc_per_node", str(ranks), str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if killed:
        assert proc.returncode != 0
        return [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(ranks)]
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def keys(result: list[dict]) -> list[str]:
    return [k for rank in result for batch in rank["batches"] for k in batch]


@pytest.mark.distributed
def test_ddp_epoch_resume_and_elastic_resume(tmp_path):
    url = make_dataset(tmp_path / "store")
    # what each of 2 ranks reads in epoch 0, as a rank in this process computes it (the order is the
    # loader's, whatever the DataLoader workers): equal batches per rank, every sample once (up to
    # the drop)
    full = [rank_batches(url, r, 2) for r in range(2)]
    assert len(full[0]) == len(full[1]) == TOTAL // 8
    everyone = [k for rank in full for batch in rank for k in batch]
    assert len(everyone) == len(set(everyone)) and TOTAL - len(everyone) < 8

    # killed (SIGKILL) after 3 batches, resumed by a new job from its state: 2 real ranks with 2
    # DataLoader workers each read exactly those batches, the first 3 before the kill and the rest
    # after
    state = tmp_path / "state.json"
    first = torchrun(
        2, url, "--out", str(tmp_path / "first.json"), "--kill-after", "3", killed=True
    )
    assert first[0]["state"] == first[1]["state"] and first[0]["state"]["position"] == 3 * 8
    state.write_text(json.dumps(first[0]["state"]))
    rest = torchrun(2, url, "--out", str(tmp_path / "rest.json"), "--state-in", str(state))
    for r in range(2):
        assert first[r]["batches"] + rest[r]["batches"] == full[r]

    # resumed by 3 ranks instead: the rest of the epoch exactly once, equal batches per rank; then
    # the next epoch in the new world: 3 ranks x 2 workers, every sample once (up to the drop),
    # equal batches
    elastic = torchrun(
        3, url, "--out", str(tmp_path / "elastic.json"), "--state-in", str(state), "--epochs", "2"
    )
    assert len({len(r["batches"]) for r in elastic}) == 1
    seen = keys(first) + keys(elastic)
    assert len(seen) == len(set(seen)) and TOTAL - len(seen) < 3 * 4
    next_epoch = [[k for batch in r["later"][0] for k in batch] for r in elastic]
    assert {len(r["later"][0]) for r in elastic} == {TOTAL // 12}
    everyone = [k for keys_of_rank in next_epoch for k in keys_of_rank]
    assert len(everyone) == len(set(everyone)) == TOTAL // 12 * 12
    # the global order of epoch 1 is the 1-rank order: batch g of rank r is slice r of global batch
    # g
    interleaved = [
        k
        for step in zip(*(r["later"][0] for r in elastic), strict=True)
        for batch in step
        for k in batch
    ]
    assert interleaved == one_rank_order(url, epoch=1)[: len(interleaved)]
    assert all(r["state"]["epoch"] == 2 and r["state"]["position"] == 0 for r in elastic)


def rank_batches(url: str, rank: int, world_size: int) -> list[list[str]]:
    """The keys of each batch that ``rank`` of ``world_size`` reads in epoch 0, read in this
    process."""
    import datapipe

    loader = datapipe.Loader(
        url, batch_size=4, rank=rank, world_size=world_size, num_workers=0, seed=11
    )
    return [list(batch["__key__"]) for batch in loader]


def one_rank_order(url: str, epoch: int) -> list[str]:
    import datapipe

    loader = datapipe.Loader(url, batch_size=4, rank=0, world_size=1, num_workers=0, seed=11)
    loader.set_epoch(epoch)
    return [k for batch in loader for k in batch["__key__"]]
