"""The Sparse VD section of ``report.md``: what the log α > threshold rule removes, per layer, and the
distribution of log α (from ``metrics.json`` and ``scores.npz`` alone)."""

from pathlib import Path

import numpy as np

from bayesprune.core.files import read_npz


def report_sections(run_dir, metrics: dict) -> list:
    if "fraction_removed_by_threshold" not in metrics:
        return []
    run_dir = Path(run_dir)
    threshold = metrics["log_alpha_threshold"]
    rows = "\n".join(
        f"| `{site}` | {100 * fraction:.2f} |" for site, fraction in metrics.get("layer_fraction_removed", {}).items()
    )
    text = (
        "## Sparse VD: weights with log α above the threshold (Molchanov et al., 2017)\n\n"
        f"The test-time network uses θ with every weight of log α > {threshold:g} set to zero, so every point "
        f"of the pruning curve below that fraction is that network. The rule removes "
        f"{100 * metrics['fraction_removed_by_threshold']:.2f} % of the weights "
        f"({metrics['compression_by_threshold']:.1f}x fewer); biases are never pruned.\n\n"
        f"| site | removed (%) |\n|---|---|\n{rows}"
    )
    sections = [text]
    scores = run_dir / "scores.npz"
    if scores.exists():
        from bayesprune.analysis.plots import plt, save_figure

        log_alpha = -np.concatenate([values.ravel() for values in read_npz(scores).values()])
        figure, axis = plt.subplots(figsize=(5, 3.2))
        axis.hist(np.clip(log_alpha[np.isfinite(log_alpha)], -12, 20), bins=100, color="tab:blue")
        axis.axvline(threshold, color="tab:red", linestyle="--", label=f"log α = {threshold:g}")
        axis.set_xlabel("log α (clipped to [-12, 20])")
        axis.set_ylabel("weights")
        axis.set_yscale("log")
        axis.legend()
        save_figure(figure, run_dir / "log_alpha.png")
        sections.append("![histogram of log α over every weight](log_alpha.png)")
    return sections
