"""One rank of a DDP job for tests/distributed/test_ddp.py: read an epoch, or save the loader state
and die.

Run under torchrun (gloo, CPU). Rank 0 writes the keys every rank saw, per batch, to --out.
"""

import argparse
import gc
import json
import os
import signal

import torch.distributed as dist

import datapipe


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dataset")
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--kill-after", type=int, default=None, help="SIGKILL every rank after this many batches"
    )
    parser.add_argument("--state-in")
    parser.add_argument(
        "--epochs", type=int, default=1, help="epochs to read, the (resumed) current one first"
    )
    args = parser.parse_args()
    dist.init_process_group("gloo")
    loader = datapipe.Loader(
        args.dataset, batch_size=args.batch_size, num_workers=args.workers, seed=11
    )
    if args.state_in:
        with open(args.state_in) as f:
            loader.load_state_dict(json.load(f))
    loader.set_epoch(loader.epoch)
    batches = []
    for batch in loader:
        batches.append(batch["__key__"])
        dist.barrier()  # ranks in lock step, as gradient all-reduce keeps them
        if args.kill_after is not None and len(batches) == args.kill_after:
            # what a checkpoint holds, then the job dies as a preempted node does: no cleanup, no
            # exit code 0, the rank and its DataLoader workers at once where torchrun made the rank
            # a process group's leader (torch >= 2.2). Killing the rank alone leaves its workers
            # orphaned until they notice, seconds later.
            with open(f"{args.out}.rank{dist.get_rank()}", "w") as f:
                json.dump({"batches": batches, "state": loader.state_dict()}, f)
            if os.getpgrp() == os.getpid():
                os.killpg(os.getpgrp(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
    later = []  # the keys of each further epoch, per batch
    for _ in range(args.epochs - 1):
        loader.set_epoch(loader.epoch)  # the state names the next epoch once one is complete
        later.append([batch["__key__"] for batch in loader])
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(
        everyone,
        {"rank": dist.get_rank(), "batches": batches, "later": later, "state": loader.state_dict()},
    )
    if dist.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump(everyone, f)
    dist.destroy_process_group()
    # the interpreter's last garbage collection at exit walks every object torch made, ~1 s per
    # rank; all that matters is written, so leave those objects out of it
    gc.freeze()


if __name__ == "__main__":
    main()
