"""Time a comparison whose cells of one method that differ only in their seed train together against the
same comparison with every cell fitted alone (``--alone``), in one run (issue 51, item 1).

Each round runs ``bayesprune compare`` twice into fresh folders, the order alternating: ``--methods``
(default the sBNN and Sparse VD, whose cells of the K ``--seeds`` are one stacked fit each; magnitude
pruning, the comparison's baseline, always runs and stacks too) at one sparsity, ``--jobs`` workers.
Reports the median wall time of each (the whole command: workers' start, data, fits, leaderboard), their
ratio, and the largest difference between the two leaderboards' test errors (points).

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/compare_together.py --seeds 8 --epochs 10
    python benchmarks/compare_together.py --config compare-lenet300 --seeds 3 --epochs 2 --jobs 4 --device cuda
"""

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def compare(args, out: Path, alone: bool) -> float:
    """Seconds of one ``bayesprune compare`` into ``out``."""
    command = [sys.executable, "-m", "bayesprune", "compare", args.config, "--out", str(out), "--quiet"]
    command += ["--methods", *args.methods, "--sparsities", str(args.sparsity), "--jobs", str(args.jobs)]
    command += ["--seeds", *map(str, range(args.seeds))]
    for setting in (f"train.epochs={args.epochs}", f"device={args.device!r}"):
        command += ["--set", setting]
    start = time.perf_counter()
    subprocess.run([*command, *(["--alone"] if alone else [])], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def test_errors(out: Path) -> dict:
    with open(out / "leaderboard.csv") as handle:
        return {(row["method"], row["sparsity"]): float(row["test_error"]) for row in csv.DictReader(handle)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="compare-digits")
    parser.add_argument("--methods", nargs="+", default=["sbnn", "sparse-vd"])
    parser.add_argument("--sparsity", type=float, default=0.9)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    seconds = {"together": [], "alone": []}
    difference = 0.0
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.rounds):
            order = ("together", "alone") if round_ % 2 == 0 else ("alone", "together")
            outs = {way: Path(folder) / f"{way}-{round_}" for way in order}
            for way in order:
                seconds[way].append(compare(args, outs[way], alone=way == "alone"))
            together, alone = test_errors(outs["together"]), test_errors(outs["alone"])
            difference = max(difference, *(abs(together[key] - alone[key]) for key in alone))
    result = {
        "config": args.config,
        "methods": args.methods,
        "seeds": args.seeds,
        "epochs": args.epochs,
        "jobs": args.jobs,
        "together_s": statistics.median(seconds["together"]),
        "alone_s": statistics.median(seconds["alone"]),
        "largest_test_error_difference": difference,
    }
    result["ratio"] = result["together_s"] / result["alone_s"]
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{args.seeds} seeds of {', '.join(args.methods)} and magnitude, {args.epochs} epochs, --jobs {args.jobs}: "
            f"together {result['together_s']:.1f} s, alone {result['alone_s']:.1f} s (ratio {result['ratio']:.2f}); "
            f"test errors differ by at most {difference:.3g} points"
        )


if __name__ == "__main__":
    main()
