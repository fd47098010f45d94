"""In process, a thread ahead or none: W1 and W2 read by ``Loader(num_workers=0)`` with ``prefetch``
0 and 4.

``python -m benchmarks.prefetch [--rounds 5] [--workdir DIR]`` writes W1 and W2 with datapipe (once,
kept in DIR), then for each kind of training loop runs one fresh process per prefetch setting,
alternately, for ``--rounds`` rounds (the VM's speed drifts within minutes; alternation puts both
settings in the same minutes). Each process reads two epochs and reports the second (the first pays
torch's import).
Loops: ``empty`` (touches every payload, as the main benchmark does), ``python`` (plus ~100 us of
Python per batch, which holds the GIL), ``sleep`` (plus a 0.3 ms sleep per batch, which does not);
and W2 with the empty loop. Prints the median samples/s per loop and setting, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

LOOPS = ("empty", "python", "sleep", "w2")
SETTINGS = (0, 4)


def ensure(workdir: str, which: int) -> str:
    """W1 (``which`` 0) or W2 (1), written with datapipe into ``workdir`` unless it is there."""
    from benchmarks import ours
    from benchmarks.workloads import generate, workloads

    out = os.path.join(workdir, f"w{which + 1}")
    if not os.path.exists(os.path.join(out, "complete")):
        ours.write(generate(workloads(False)[which]), out)
        open(os.path.join(out, "complete"), "w").close()
    return out


def one(out: str, prefetch: int, loop: str) -> float:
    """Samples/s of the second of two epochs, in this process."""
    import datapipe
    from benchmarks import ours

    def extra() -> None:
        if loop == "python":
            total = 0
            for i in range(3000):
                total += i
        elif loop == "sleep":
            time.sleep(0.0003)

    rate = 0.0
    for _ in range(2):
        start = time.perf_counter()
        loader = datapipe.Loader(
            ours.url(out),
            batch_size=ours.BATCH,
            num_workers=0,
            shuffle=False,
            decode={"bin": "ragged"},
            prefetch=prefetch,
        )
        samples = 0
        for batch in loader:
            samples += ours._touch_ragged(batch["bin"])[0]
            extra()
        rate = samples / (time.perf_counter() - start)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", default=None)
    parser.add_argument(
        "--one", nargs=3, metavar=("OUT", "PREFETCH", "LOOP"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.one[2])))
        return
    workdir = args.workdir or tempfile.mkdtemp(prefix="datapipe-prefetch-")
    outs = {loop: ensure(workdir, int(loop == "w2")) for loop in LOOPS}
    rates: dict[tuple[str, int], list[float]] = {(loop, p): [] for loop in LOOPS for p in SETTINGS}
    for _ in range(args.rounds):
        for loop in LOOPS:
            for p in SETTINGS:
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "benchmarks.prefetch",
                        "--one",
                        outs[loop],
                        str(p),
                        loop,
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                rates[(loop, p)].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        f"Loader(num_workers=0), second epoch, median of {args.rounds} "
        "alternating processes (W1 unless w2)"
    )
    for loop in LOOPS:
        none, ahead = (statistics.median(rates[(loop, p)]) for p in SETTINGS)
        spread = "  ".join(
            f"p{p}: " + ",".join(f"{r / 1e3:.0f}k" for r in rates[(loop, p)]) for p in SETTINGS
        )
        print(
            f"{loop:7s} prefetch=0 {none / 1e3:6.0f}k/s  prefetch=4 {ahead / 1e3:6.0f}k/s  "
            f"none/ahead {none / ahead:4.2f}x   ({spread})"
        )


if __name__ == "__main__":
    main()
