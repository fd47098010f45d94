"""When the loader lets the cache have a shard back: never while a later step of the same consumer
reads it.

``EpochOrder.done_at`` gives, per shard, the epoch position from which the order reads it no more;
``produce`` releases a shard once the consumer's next step starts at or past it. Swept over shard
sizes, block sizes, seeds, shuffling, worlds and workers.
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from datapipe.loader.schedule import BatchPlan, EpochOrder, worker_steps


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 30), min_size=1, max_size=25),
    block=st.integers(1, 6),
    seed=st.integers(0, 2**16),
    shuffle=st.booleans(),
    batch=st.integers(1, 20),
    world=st.integers(1, 3),
    workers=st.integers(1, 3),
)
def test_no_shard_is_read_after_its_release_point(
    sizes, block, seed, shuffle, batch, world, workers
):
    if sum(sizes) == 0:
        return
    order = EpochOrder(np.array(sizes), seed, 1, shuffle, block)
    done_at = order.done_at()
    k = max(1, block)
    # what is read together: the block (shuffled) or the shard
    unit = np.empty(len(sizes), dtype=np.int64)
    unit[order.shard_order] = np.arange(len(sizes)) // k if shuffle else order.shard_order
    plan = BatchPlan(sum(sizes), batch, world)
    for rank in range(world):
        for worker in range(workers):
            steps = list(worker_steps(plan.num_batches(), worker, workers))
            reads = [set(order.locate(plan.positions(rank, step))[0].tolist()) for step in steps]
            released_at: dict[int, int] = {}
            for i in range(len(steps)):
                after = (
                    int(plan.positions(rank, steps[i + 1]).min()) if i + 1 < len(steps) else None
                )
                for shard in set().union(*reads[: i + 1]) - set(released_at):
                    if after is None or done_at[shard] <= after:
                        released_at[shard] = i
            for shard, i in released_at.items():
                last_read = max(
                    j for j, read in enumerate(reads) if {unit[s] for s in read} & {unit[shard]}
                )
                # never before a later read, and at the very step its block is done
                assert i == last_read


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.lists(st.integers(1, 12), min_size=1, max_size=5), min_size=1, max_size=3),
    data=st.data(),
    seed=st.integers(0, 2**16),
    shuffle=st.booleans(),
    batch=st.integers(1, 9),
    world=st.integers(1, 3),
    workers=st.integers(1, 3),
    epoch=st.integers(0, 3),
)
def test_a_mix_releases_a_shard_only_after_its_last_read_in_the_epoch(
    sizes, data, seed, shuffle, batch, world, workers, epoch
):
    from datapipe.loader.interleave import Interleave
    from datapipe.loader.mix_order import MixOrder, Segment

    k = len(sizes)
    weights = data.draw(st.lists(st.integers(1, 6), min_size=k, max_size=k))
    total = data.draw(st.integers(1, 3 * sum(map(sum, sizes))))
    segment = Segment(
        data.draw(st.integers(0, total * epoch)),
        tuple(data.draw(st.lists(st.integers(0, 40), min_size=k, max_size=k))),
    )
    order = MixOrder(
        tuple(f"s{i}" for i in range(k)),
        tuple(np.array(s) for s in sizes),
        Interleave(weights),
        segment,
        total,
        seed,
        epoch,
        shuffle,
        2,
    )
    start = max(segment.start - epoch * total, 0)
    if start >= total:
        return
    done_at = order.done_at()
    plan = BatchPlan(total, batch, world, start=start)
    for rank in range(world):
        for worker in range(workers):
            steps = list(worker_steps(plan.num_batches(), worker, workers))
            reads = [set(order.locate(plan.positions(rank, step))[0].tolist()) for step in steps]
            for i in range(len(steps) - 1):
                after = int(plan.positions(rank, steps[i + 1]).min())
                released = {s for s in set().union(*reads[: i + 1]) if done_at[s] <= after}
                # never read again once given back
                assert not released & set().union(*reads[i + 1 :])
