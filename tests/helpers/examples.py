"""The repository's training examples run as a user runs them: torchrun, 2 ranks on CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]
BIN = Path(sys.executable).parent


def torchrun_example(script: str, cwd: Path, *args: str) -> list[dict]:
    """``torchrun --standalone --nproc_per_node 2 examples/SCRIPT ARGS`` in ``cwd``; the JSON lines
    rank 0 printed (a failed job fails the test with its stderr)."""
    out = subprocess.run(
        [
            str(BIN / "torchrun"),
            "--standalone",
            "--nproc_per_node",
            "2",
            str(REPO / "examples" / script),
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
