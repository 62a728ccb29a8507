"""UCI regression benchmark of the sBNN (paper 003, section 4.2, Tables 2-3).

Runs the packaged ``uci`` config, as shipped, on every data set folder under ``--data-root`` and
writes a Markdown table of test RMSE (mean ± standard error over splits) of the sBNN, of the plain
network of the same shape trained under the same rule, and with 50% of the weights removed, beside
the paper's numbers::

    python benchmarks/uci.py --data-root ../shared/data/uci --out runs/uci [--splits 5] [--sets kin8nm ...]
        [--jobs 2] [--resume] [--set key=value ...]

Every set gets the same settings: a budget of gradient steps, minibatches of a hundredth of the
training rows (at least 32), and the epoch that scores best on a tenth of each training split held
out (the test split is read once, at the end). ``--set`` overrides apply to every set.
"""
import argparse
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from bayesprune.config import load_config
from bayesprune.runner import run

# Paper 003, Table 3: sBNN full model (mean, standard error) and with 50% of the weights removed.
PAPER = {
    "bostonHousing": ((3.07, 0.14), 3.07),
    "energy": ((0.69, 0.08), 0.69),
    "kin8nm": ((0.08, 0.00), 0.33),
    "naval-propulsion-plant": ((0.00, 0.00), 0.01),
    "power-plant": ((4.00, 0.04), 8.77),
    "protein-tertiary-structure": ((4.48, 0.02), 4.84),
    "wine-quality-red": ((0.62, 0.01), 0.62),
}


def reaches_paper(name: str, mean: float) -> bool:
    """The paper's sBNN mean RMSE or better, both at the two decimals the paper prints."""
    (paper_mean, _), _ = PAPER[name]
    return round(mean, 2) <= paper_mean


def run_set(folder: Path, args) -> dict:
    """Run the packaged config on one set folder (in a worker process); returns its benchmark record."""
    torch.set_num_threads(1)
    overrides = [f"data.root={json.dumps(str(args.data_root))}", f"data.name={json.dumps(folder.name)}", *args.overrides]
    if args.splits:
        overrides.append(f"data.splits={list(range(args.splits))}")
    start = time.perf_counter()
    metrics = run(load_config("uci", overrides), args.out / folder.name, force=args.force)
    record = {"seconds": time.perf_counter() - start, "overrides": overrides, "metrics": metrics}
    (args.out / folder.name / "benchmark.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def _cell(metrics: dict, key: str) -> str:
    """Mean ± standard error at two decimals, or two significant digits below 0.1 (naval's RMSE is
    about 0.001: at the paper's two decimals the sBNN and the plain network both print 0.00)."""
    mean = metrics[key]
    digits = max(2, 1 - math.floor(math.log10(abs(mean)))) if mean and math.isfinite(mean) else 2
    return f"{mean:.{digits}f} ± {metrics.get(key + '_stderr', 0.0):.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--splits", type=int, help="use only the first K splits of each set")
    parser.add_argument("--sets", nargs="+", help="only these data set folders (default: every folder with a data.txt)")
    parser.add_argument("--jobs", type=int, default=1, help="sets run at once, one CPU thread each")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--resume", action="store_true", help="reuse the finished sets already under --out instead of re-running them")
    args = parser.parse_args()

    folders = sorted(path for path in args.data_root.iterdir() if (path / "data.txt").exists())
    if args.sets:
        folders = [folder for folder in folders if folder.name in args.sets]
    done = {folder.name: json.loads((args.out / folder.name / "benchmark.json").read_text()) for folder in folders
            if args.resume and (args.out / folder.name / "benchmark.json").exists()}
    todo = [folder for folder in folders if folder.name not in done]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for folder, record in zip(todo, pool.map(run_set, todo, [args] * len(todo))):
            done[folder.name] = record
            print(f"{folder.name}: {_cell(record['metrics'], 'test_rmse')} ({record['seconds']:.0f} s)", flush=True)

    lines = [
        "| data set | splits | sBNN (bayesprune) | plain network | 50% removed | paper sBNN | paper 50% removed | reaches paper | beats plain |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    reached = beaten = 0
    for folder in folders:
        metrics = done[folder.name]["metrics"]
        half = next(row for row in metrics["pruning_curve"] if row["droprate"] == 0.5)
        (paper_mean, paper_stderr), paper_half = PAPER.get(folder.name, ((float("nan"), float("nan")), float("nan")))
        reach = folder.name in PAPER and reaches_paper(folder.name, metrics["test_rmse"])
        beat = metrics["test_rmse"] < metrics["baseline_test_rmse"]
        reached, beaten = reached + reach, beaten + beat
        lines.append(
            f"| {folder.name} | {metrics.get('splits', 1)} | {_cell(metrics, 'test_rmse')} | {_cell(metrics, 'baseline_test_rmse')} "
            f"| {half['test_rmse']:.2f} | {paper_mean:.2f} ± {paper_stderr:.2f} | {paper_half:.2f} "
            f"| {'yes' if reach else 'no'} | {'yes' if beat else 'no'} |"
        )
    seconds = sum(record["seconds"] for record in done.values())
    lines += ["", f"{reached} of {len(folders)} sets at or below the paper's sBNN mean; the sBNN beats the plain network "
              f"on {beaten} of {len(folders)}; {seconds:.0f} s of runs (sum over sets).", ""]
    table = "\n".join(lines) + "\n"
    (args.out / "uci_results.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
