"""examples/train_ddp.py for real: 2 DDP ranks on CPU reach 90% on the held-out digits, and a restart resumes."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).parents[2]
BIN = Path(sys.executable).parent


@pytest.mark.distributed
def test_train_ddp_example_learns_digits_and_resumes_from_its_checkpoint(tmp_path):
    for name in ("digits.yaml", "digits_code.py"):
        shutil.copy(REPO / "pipelines" / name, tmp_path / name)
    subprocess.run([sys.executable, str(REPO / "pipelines" / "prepare_digits.py"), "--out", str(tmp_path / "raw")],
                   check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "datapipe", "build", "digits.yaml", "--workers", "1"], cwd=tmp_path,
                   check=True, capture_output=True)

    def train(epochs: int) -> list[dict]:
        out = subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2",
                              str(REPO / "examples" / "train_ddp.py"), "storage/digits", "--epochs", str(epochs),
                              "--checkpoint", "digits.pt"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]

    log = train(8)
    assert [e["epoch"] for e in log] == list(range(8)) and log[-1]["accuracy"] >= 0.9
    state = torch.load(tmp_path / "digits.pt", weights_only=False)
    assert state["loader"]["epoch"] == 8 and state["loader"]["position"] == 0
    assert [e["epoch"] for e in train(9)] == [8]  # the restart continues where the checkpoint left off
