"""``report.md`` and its plots, regenerated from the files of a run directory alone."""
import csv
import json
from pathlib import Path

import numpy as np

from .evaluation import metric_name
from .plots import plot_elbo, plot_inclusion_cdf, plot_pruning_curve


def _markdown_table(rows, columns):
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c]) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(run_dir) -> Path:
    """Write ``report.md`` with ``elbo.png``, ``inclusion_cdf.png`` and ``pruning_curve.png`` into ``run_dir``."""
    run_dir = Path(run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    with open(run_dir / "elbo.csv", newline="") as handle:
        elbo = [float(row["elbo"]) for row in csv.DictReader(handle)]
    with np.load(run_dir / "inclusion_probabilities.npz") as saved:
        probabilities = np.concatenate([saved[name].ravel() for name in saved.files])
    metric = metric_name(metrics["task"])
    baseline = metrics.get(f"baseline_{metric}")

    plot_elbo(elbo, run_dir / "elbo.png")
    plot_inclusion_cdf(probabilities, run_dir / "inclusion_cdf.png")
    plot_pruning_curve(metrics["pruning_curve"], metric, run_dir / "pruning_curve.png", baseline=baseline)

    unit = " (%)" if metric == "test_error" else ""
    summary = [
        ("method", metrics["method"]),
        ("dataset", metrics["dataset"]),
        ("architecture", metrics["architecture"]),
        ("device", metrics["device"]),
        ("weights", metrics["n_weights"]),
        ("epochs", metrics["epochs"]),
        ("training time (s)", metrics["train_seconds"]),
        (f"{metric}{unit}, posterior mean", f"{metrics[metric]:.4g}"),
        (f"{metric}{unit}, MC predictive", f"{metrics[metric + '_mc']:.4g}"),
        (f"{metric}{unit}, plain network", "—" if baseline is None else f"{baseline:.4g}"),
        ("weights with p < 0.5", f"{100 * metrics['fraction_inclusion_below_half']:.1f} %"),
    ]
    text = "\n\n".join([
        f"# bayesprune run: {metrics['method']} on {metrics['dataset']}",
        "| quantity | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in summary),
        "## Pruning by inclusion probability\n\nWeights are ranked globally by their variational inclusion "
        "probability p*(m, σ) and the lowest fraction (the droprate) is set to zero.",
        _markdown_table(metrics["pruning_curve"], ["droprate", "n_weights_kept", metric, f"{metric}_mc"]),
        "![test metric against droprate](pruning_curve.png)",
        "## Inclusion probabilities\n\n![CDF of inclusion probabilities](inclusion_cdf.png)",
        "## Optimisation\n\n![ELBO trace](elbo.png)",
    ])
    path = run_dir / "report.md"
    path.write_text(text + "\n")
    return path
