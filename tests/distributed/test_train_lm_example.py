"""examples/train_lm.py for real: 2 DDP ranks on CPU train a small GPT on packed rows of the text
example's token version, the loss falls, and a job stopped mid-run and restarted from its
checkpoint ends with exactly the weights and loader state of the uninterrupted job."""

import subprocess
import sys

import pytest
import torch
from helpers.examples import REPO, torchrun_example

from datapipe.builder.config import load_pipeline
from datapipe.builder.in_process import InProcessClient
from datapipe.builder.run import Execution, build
from datapipe.versioning.store import Store


@pytest.mark.distributed
def test_train_lm_example_learns_and_resumes_exactly(tmp_path):
    pipelines = tmp_path / "pipelines"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "pipelines" / "prepare_text.py"),
            "--out",
            str(pipelines / "raw" / "text"),
        ],
        check=True,
        capture_output=True,
    )
    (pipelines / "text.yaml").write_bytes((REPO / "pipelines" / "text.yaml").read_bytes())
    store = Store(str(tmp_path / "storage"))
    execution = Execution(client=InProcessClient(threads=2))
    build(load_pipeline(pipelines / "text.yaml"), store, execution=execution)

    def train(checkpoint: str, *more: str) -> list[dict]:
        data = str(tmp_path / "storage" / "text")
        return torchrun_example(
            "train_lm.py", tmp_path, data, "--checkpoint", checkpoint, "--steps", "60", *more
        )

    whole = train("full.pt")
    assert [r["step"] for r in whole] == [10, 20, 30, 40, 50, 60]
    assert whole[-1]["loss"] < whole[0]["loss"] - 0.3  # it learns the text

    # 60 steps cross an epoch (about 31 steps of 2 x 8 rows of 128 tokens); stop in the first
    assert train("cut.pt", "--max-steps", "25") == whole[:2]
    assert train("cut.pt") == whole[2:]
    full, cut = (torch.load(tmp_path / n, weights_only=False) for n in ("full.pt", "cut.pt"))
    assert full["loader"] == cut["loader"] and full["loader"]["epoch"] == 1
    for name, weights in full["model"].items():
        assert torch.equal(weights, cut["model"][name]), name
