"""One rank of a DDP job for tests/distributed/test_ddp.py: read an epoch, maybe stop and save the loader state.

Run under torchrun (gloo, CPU). Rank 0 writes the keys every rank saw, per batch, to --out.
"""

import argparse
import json

import torch.distributed as dist

import datapipe


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dataset")
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--stop-after", type=int, default=None)
    parser.add_argument("--state-in")
    parser.add_argument("--state-out")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    loader = datapipe.Loader(args.dataset, batch_size=args.batch_size, num_workers=args.workers, seed=11)
    if args.state_in:
        with open(args.state_in) as f:
            loader.load_state_dict(json.load(f))
    loader.set_epoch(loader.epoch)
    batches = []
    for batch in loader:
        batches.append(batch["__key__"])
        dist.barrier()  # ranks in lock step, as gradient all-reduce keeps them
        if args.stop_after is not None and len(batches) == args.stop_after:
            break
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, {"rank": dist.get_rank(), "batches": batches, "state": loader.state_dict()})
    if dist.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump(everyone, f)
        if args.state_out:
            with open(args.state_out, "w") as f:
                json.dump(loader.state_dict(), f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
