"""examples/train_ddp.py for real: 2 DDP ranks on CPU, trained on the train split of the digits,
reach 90% on its val split, and a job stopped mid-epoch and restarted from its last checkpoint ends
with exactly the weights of the uninterrupted job."""

import pytest
import torch
from helpers.examples import torchrun_example


@pytest.mark.distributed
def test_train_ddp_example_learns_digits_and_resumes_mid_epoch_from_its_checkpoint(
    tmp_path, digits_built
):
    # what `datapipe build digits.yaml` makes: the session's digits build (training only reads it)
    # train samples // (ranks x batch size)
    steps_per_epoch = digits_built.summary["splits"]["train"] // (2 * 32)
    assert 17 < steps_per_epoch < 30  # (22) step 30 and step 35 fall in epoch 1

    def train(checkpoint: str, epochs: int, *more: str) -> list[dict]:
        return torchrun_example(
            "train_ddp.py",
            tmp_path,
            digits_built.url,
            "--epochs",
            str(epochs),
            "--checkpoint",
            checkpoint,
            "--checkpoint-every",
            "10",
            *more,
        )

    def checkpoint(name: str) -> dict:
        return torch.load(tmp_path / name, weights_only=False)

    uninterrupted = train("full.pt", 4)
    assert [e["epoch"] for e in uninterrupted] == [0, 1, 2, 3]

    # stopped after 35 steps, in epoch 1; the last checkpoint is from step 30, also in epoch 1
    assert train("cut.pt", 4, "--max-steps", "35") == uninterrupted[:1]
    state = checkpoint("cut.pt")["loader"]
    assert (state["epoch"], state["position"]) == (1, (30 - steps_per_epoch) * 2 * 32)
    resumed = train("cut.pt", 4)
    assert resumed == uninterrupted[1:]  # same loss and accuracy at the end of epochs 1 to 3
    full, cut = checkpoint("full.pt"), checkpoint("cut.pt")
    assert (
        full["loader"] == cut["loader"]
        and full["loader"]["epoch"] == 4
        and full["loader"]["position"] == 0
    )
    # no batch trained twice or skipped: the very same weights
    for name, weights in full["model"].items():
        assert torch.equal(weights, cut["model"][name]), name

    # and it learns the digits: past 0.9 on the val split after four epochs (about 0.95 after five)
    assert uninterrupted[-1]["accuracy"] >= 0.9, uninterrupted
