"""Write scikit-learn's digits (1,797 8x8 images) as raw CSV the way real raw data looks.

Two files, pipelines/raw/digits-0.csv and digits-1.csv, with columns id, label, pixels (64
values 0-16, space separated) and note, and the faults the cleaning stages must handle:
missing labels, duplicate ids, labels out of range, and a malformed line.

    python pipelines/prepare_digits.py [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import os

from sklearn.datasets import load_digits

HERE = os.path.dirname(os.path.abspath(__file__))


def rows() -> list[list[str]]:
    """The clean rows, then the faults mixed in at fixed places (the output is the same every
    run)."""
    digits = load_digits()
    out = []
    for i, (image, label) in enumerate(zip(digits.data.astype(int), digits.target, strict=True)):
        note = "" if i % 7 else f"scan batch {i // 100}"
        out.append([f"d{i:04d}", str(label), " ".join(map(str, image)), note])
    for i in range(3, len(out), 150):  # missing labels: dropped by dropna
        out[i][1] = ""
    # labels out of range: -1 is filtered out, 12 is quarantined by validate
    for i in range(5, len(out), 300):
        out[i][1] = "-1"
        out[i + 1][1] = "12"
    for i in range(10, len(out), 200):  # duplicate ids: the later copy is dropped by dedupe
        out.insert(i + 1, list(out[i]))
    return out


def main() -> None:
    """Write the two raw files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "raw"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    data = rows()
    half = len(data) // 2
    for n, chunk in enumerate((data[:half], data[half:])):
        path = os.path.join(args.out, f"digits-{n}.csv")
        with open(path, "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(["id", "label", "pixels", "note"])
            writer.writerows(chunk[:40])
            if n == 0:
                f.write("d9999,3,0 0 0,a malformed line,with an extra field\n")
            writer.writerows(chunk[40:])
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
