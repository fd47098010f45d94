"""One rank of a DDP job for tests/distributed/test_ledger_ddp.py: read with skips across a resume,
and the ledger.

Run under torchrun (gloo, CPU, 2 DataLoader workers). Reads a mix file with skip_steps, stops after
--stop-after batches, resumes a new Loader from the state, adds a skip, and reads on to the end of
--epochs epochs. Rank 0 writes every rank's batches (global step, sources, keys) and the ledger's
batch_keys of every step up to the end to --out.
"""

import argparse
import gc
import json

import torch.distributed as dist

import datapipe


def read(loader, batches, limit=None):
    for batch in loader:
        batches.append(
            {
                "step": loader.step - 1,
                "keys": list(zip(batch["__source__"], batch["__key__"], strict=True)),
            }
        )
        dist.barrier()  # ranks in lock step, as gradient all-reduce keeps them
        if limit is not None and len(batches) == limit:
            return


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mix_file")
    parser.add_argument("--out", required=True)
    parser.add_argument("--stop-after", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    options = {"batch_size": 2, "num_workers": 2, "seed": 5}
    loader = datapipe.Loader(args.mix_file, skip_steps=[(1, 3)], **options)
    batches = []
    read(loader, batches, args.stop_after)
    state = json.loads(json.dumps(loader.state_dict()))  # as a checkpoint holds it
    resumed = datapipe.Loader(args.mix_file, **options)
    resumed.load_state_dict(state)
    resumed.skip_steps(8, 10)  # the spike found after the checkpoint
    while resumed.epoch < args.epochs:
        read(resumed, batches)
    ledger = {
        step: resumed.batch_keys(step, dist.get_rank())
        for step in range(state["step"], resumed.step)
    }
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(
        everyone,
        {
            "rank": dist.get_rank(),
            "batches": batches,
            "ledger": ledger,
            "end": resumed.step,
            "state": resumed.state_dict(),
        },
    )
    if dist.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump(everyone, f)
    dist.destroy_process_group()
    gc.freeze()  # as in ddp_run.py: the exit's collection would walk every object torch made


if __name__ == "__main__":
    main()
