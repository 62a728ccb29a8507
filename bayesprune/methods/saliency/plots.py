"""Tables and plots of a saliency run (paper 001: criteria × stages π × penalties λ), from its
``metrics.json`` alone."""

import numpy as np

from bayesprune.analysis.plots import plt, save_figure
from bayesprune.analysis.tables import markdown_table
from bayesprune.core.tasks import is_classification


def saliency_table(metrics: dict) -> str:
    """One row per criterion: its best grid point (lowest ΔL at the largest π, Tables 1 and 3), the error
    gaps before and after fine-tuning of that point (points of the test split, the paper's validation
    set with ``data.validation = true``), the lowest gaps over λ at that π before fine-tuning (Table 3)
    and over its fine-tuned points after fine-tuning (Table 2), and Spearman's ρ between ΔL and the gap
    after fine-tuning over its fine-tuned points (section 6.1; "—" where undefined)."""

    def cell(value):
        return "—" if value is None else value

    rows = [
        {
            "criterion": criterion,
            "π": best["stages"],
            "best λ": best["penalty"],
            "ΔL": cell(best["delta_loss"]),
            "gap before fine-tuning": cell(best["gap_before_finetune"]),
            "gap after fine-tuning": cell(best["gap_after_finetune"]),
            "lowest gap before (over λ)": cell(best.get("lowest_gap_before_finetune")),
            "lowest gap after (fine-tuned points)": cell(best.get("lowest_gap_after_finetune")),
            "Spearman ρ": cell(best["rho"]),
        }
        for criterion, best in metrics["best"].items()
    ]
    before = metrics.get("error_before_pruning")
    classification = is_classification(metrics.get("task", "classification"))
    name, unit = ("Error", " %") if classification else ("RMSE", "")
    lead = "Errors are measured on the test split (the held-out validation images with `data.validation = true`). "
    lead += "" if before is None else f"{name} before pruning: {before:.4g}{unit}. "
    rho = metrics.get("spearman_rho")
    lead += (
        f"Gaps are {'errors' if classification else 'RMSEs'} minus the one before pruning"
        f"{', in points' if classification else ''}. Spearman's ρ over all fine-tuned points: "
        f"{'—' if rho is None else f'{rho:.3f}'} ({metrics.get('finetuned_points', '?')} points)."
    )
    return lead + "\n\n" + markdown_table(rows, list(rows[0]))


def _loss_scale(values) -> str:
    values = [v for v in values if v is not None and np.isfinite(v)]
    return "log" if values and min(values) > 0 else "symlog"


def plot_delta_loss(metrics: dict, path):
    """Paper 001, Fig. 1: ΔL(θ, Δθ) against λ, one line per number of stages π, one panel per criterion;
    magnitude pruning (invariant to λ and π) is also drawn dashed black in the other panels."""
    criteria = list(dict.fromkeys(c for c, _, _ in metrics["grid"]))
    figure, axes = plt.subplots(1, len(criteria), figsize=(4 * len(criteria), 3.5), squeeze=False)
    rows = list(zip(metrics["grid"], metrics["delta_loss"]))
    positive = sorted({penalty for _, _, penalty in metrics["grid"] if penalty > 0})
    magnitude = [loss for (c, _, _), loss in rows if c == "magnitude"]
    for axis, criterion in zip(axes[0], criteria):
        for stages in dict.fromkeys(s for c, s, _ in metrics["grid"] if c == criterion):
            points = sorted((penalty, loss) for (c, s, penalty), loss in rows if c == criterion and s == stages)
            axis.plot(*zip(*points), marker="o", label=f"π = {stages}")
        if magnitude and criterion != "magnitude":
            axis.axhline(float(np.mean(magnitude)), color="black", linestyle="--", label="magnitude")
        if positive:
            axis.set_xscale("symlog", linthresh=positive[0])
            axis.set_xlim(left=0)  # penalties are never negative: no mirrored decades left of λ = 0
        axis.set_yscale(_loss_scale(loss for (c, _, _), loss in rows if c == criterion))
        axis.set(xlabel="penalty λ", ylabel="ΔL(θ, Δθ) (training loss)", title=criterion)
        axis.legend()
    save_figure(figure, path)


def plot_gap_against_delta_loss(metrics: dict, path):
    """Paper 001, Fig. 3: the error gap after fine-tuning against ΔL(θ, Δθ) for every fine-tuned grid point,
    one colour per criterion, with Spearman's ρ (per criterion in the legend, over all points in the title)."""
    figure, axis = plt.subplots(figsize=(5.5, 4))
    rows = [
        (c, loss, gap)
        for (c, _, _), loss, gap in zip(metrics["grid"], metrics["delta_loss"], metrics["gap_after_finetune"])
        if gap is not None and loss is not None
    ]
    for criterion in dict.fromkeys(c for c, _, _ in rows):
        points = [(loss, gap) for c, loss, gap in rows if c == criterion]
        rho = metrics.get("best", {}).get(criterion, {}).get("rho")
        axis.scatter(*zip(*points), label=criterion + ("" if rho is None else f" (ρ = {rho:.2f})"))
    axis.set_xscale(_loss_scale(loss for _, loss, _ in rows))
    rho = metrics.get("spearman_rho")
    classification = is_classification(metrics.get("task", "classification"))
    unit = "error gap after fine-tuning (points)" if classification else "RMSE gap after fine-tuning"
    axis.set(
        xlabel="ΔL(θ, Δθ) (training loss)",
        ylabel=unit,
        title="Gap after fine-tuning vs ΔL" + ("" if rho is None else f", ρ = {rho:.2f}"),
    )
    if rows:
        axis.legend()
    save_figure(figure, path)
