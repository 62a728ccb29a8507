"""UCI regression benchmark of the sBNN (paper 003, section 4.2, Table 3).

Runs the packaged ``uci`` config on every data set folder under ``--data-root`` and writes a
Markdown table of test RMSE (mean ± standard error over splits) for the full network and with 50%
of the weights removed, beside the paper's numbers::

    python benchmarks/uci.py --data-root ../shared/data/uci --out runs/uci [--splits 5] [--set key=value ...]
"""
import argparse
import json
from pathlib import Path

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


def within_paper_error_bars(name: str, mean: float) -> bool:
    """At or below the paper's mean plus its standard error (two-decimal rounding, as printed)."""
    (paper_mean, paper_stderr), _ = PAPER[name]
    return round(mean, 2) <= paper_mean + paper_stderr


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--splits", type=int, help="use only the first K splits of each set")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()

    rows = []
    for folder in sorted(path for path in args.data_root.iterdir() if (path / "data.txt").exists()):
        overrides = [f"data.root={json.dumps(str(args.data_root))}", f"data.name={json.dumps(folder.name)}", *args.overrides]
        if args.splits:
            overrides.append(f"data.splits={list(range(args.splits))}")
        metrics = run(load_config("uci", overrides), args.out / folder.name, force=args.force)
        half = next(row for row in metrics["pruning_curve"] if row["droprate"] == 0.5)
        rows.append((folder.name, metrics, half))
        print(f"{folder.name}: {metrics['test_rmse']:.3f} ± {metrics.get('test_rmse_stderr', 0.0):.3f}", flush=True)

    lines = [
        "| data set | splits | sBNN (bayesprune) | 50% removed | paper sBNN | paper 50% removed | within paper's error bar |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, metrics, half in rows:
        (paper_mean, paper_stderr), paper_half = PAPER.get(name, ((float("nan"), float("nan")), float("nan")))
        lines.append(
            f"| {name} | {metrics.get('splits', 1)} | {metrics['test_rmse']:.2f} ± {metrics.get('test_rmse_stderr', 0.0):.2f} "
            f"| {half['test_rmse']:.2f} | {paper_mean:.2f} ± {paper_stderr:.2f} | {paper_half:.2f} "
            f"| {'yes' if name in PAPER and within_paper_error_bars(name, metrics['test_rmse']) else 'no'} |"
        )
    table = "\n".join(lines) + "\n"
    (args.out / "uci_results.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
