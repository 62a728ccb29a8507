"""Tables and plots of stochastic pruning runs (paper 000: PFT and PBP), from ``metrics.json`` alone."""
import numpy as np

from .plots import plt, save_figure
from .tables import markdown_table


def pft_table(metrics: dict) -> str:
    """One row per (start mask, sparsity): the one-shot mask's test error after the same fine-tuning as PFT's
    (and after as many epochs as PFT's mask and fine-tuning stages together, when measured), PFT's, and
    the share of the start mask PFT kept."""
    equal = metrics.get("osp_equal_budget_test_error", [None] * len(metrics["grid"]))
    rows = [{"start mask": criterion, "sparsity": sparsity, "OSP test error": osp,
             **({} if eq is None else {"OSP, PFT's epochs": eq}), "PFT test error": pft, "mask overlap": overlap}
            for (criterion, sparsity), osp, eq, pft, overlap in zip(metrics["grid"], metrics["osp_test_error"], equal,
                                                                   metrics["pft_test_error"], metrics["mask_overlap"])]
    return markdown_table(rows, list(rows[0]))


def plot_pft(metrics: dict, folder):
    """``mask_overlap.png`` (Fig. 2 left), ``perturbation.png`` (Fig. 2 right) and ``keep_probabilities.png`` (Fig. 11)."""
    figure, axis = plt.subplots(figsize=(5, 3.5))
    for criterion in dict.fromkeys(c for c, _ in metrics["grid"]):
        points = [(s, overlap) for (c, s), overlap in zip(metrics["grid"], metrics["mask_overlap"]) if c == criterion]
        axis.plot(*zip(*points), marker="o", label=criterion)
    axis.set(xlabel="sparsity", ylabel="kept weights shared with the start mask", title="Mask overlap, start vs PFT", ylim=(0, 1.02))
    axis.legend()
    save_figure(figure, folder / "mask_overlap.png")

    figure, axis = plt.subplots(figsize=(5, 3.5))
    scales = metrics["perturbation_scales"]
    axis.plot(scales, metrics["perturbation_increase_dense"], marker="o", label="dense (unpruned)")
    axis.plot(scales, metrics["perturbation_increase_pft"], marker="o", label="PFT (pruned)")
    axis.set(xlabel="noise std / layer weight RMS", ylabel="test error increase (points)", title="Weight perturbation")
    axis.legend()
    save_figure(figure, folder / "perturbation.png")
    plot_keep_probabilities({"PFT": metrics["keep_probability_histogram"]}, folder / "keep_probabilities.png")


def plot_keep_probabilities(histograms: dict, path):
    """Histograms of keep-probabilities λ over [0, 1] (counts per equal bin), one bar series per label."""
    figure, axis = plt.subplots(figsize=(5, 3.5))
    for label, counts in histograms.items():
        edges = np.linspace(0, 1, len(counts) + 1)
        axis.stairs(counts, edges, label=label)
    axis.set(xlabel="keep-probability λ", ylabel="weights", yscale="log", ylim=(0.5, None), title="Keep-probabilities")
    axis.legend()
    save_figure(figure, path)


def plot_bound_against_sparsity(records: list, path):
    """Paper 000, Fig. 4: for each α, the certificate on the 0-1 error (Theorem 1), the test error of the
    posterior Q and of the prior P against the target sparsity. ``records`` hold ``alpha``,
    ``target_sparsity``, ``bound``, ``posterior_test_error`` and ``prior_test_error`` (%) of PBP runs."""
    alphas = sorted({r["alpha"] for r in records})
    figure, axes = plt.subplots(1, len(alphas), figsize=(5 * len(alphas), 3.5), squeeze=False, sharey=True)
    for axis, alpha in zip(axes[0], alphas):
        rows = sorted((r for r in records if r["alpha"] == alpha), key=lambda r: r["target_sparsity"])
        sparsity = [r["target_sparsity"] for r in rows]
        axis.plot(sparsity, [100 * r["bound"] for r in rows], marker="o", label="bound on Q's error")
        axis.plot(sparsity, [r["posterior_test_error"] for r in rows], marker="o", label="Q test error")
        axis.plot(sparsity, [r["prior_test_error"] for r in rows], marker="o", label="P test error")
        axis.set(xlabel="sparsity", ylabel="error (%)", title=f"α = {alpha}", ylim=(0, None))
        axis.legend()
    save_figure(figure, path)


# Paper 001 (method ``saliency``): criteria × stages π × penalties λ.

def saliency_table(metrics: dict) -> str:
    """One row per criterion: its best grid point (lowest ΔL at the largest π, Tables 1 and 3), the error
    gaps before and after fine-tuning of that point (points of the test split, the paper's validation
    set with ``data.validation = true``), the lowest gaps over λ at that π before fine-tuning (Table 3)
    and over its fine-tuned points after fine-tuning (Table 2), and Spearman's ρ between ΔL and the gap
    after fine-tuning over its fine-tuned points (section 6.1; "—" where undefined)."""
    def cell(value):
        return "—" if value is None else value

    rows = [{"criterion": criterion, "π": best["stages"], "best λ": best["penalty"], "ΔL": cell(best["delta_loss"]),
             "gap before fine-tuning": cell(best["gap_before_finetune"]), "gap after fine-tuning": cell(best["gap_after_finetune"]),
             "lowest gap before (over λ)": cell(best.get("lowest_gap_before_finetune")),
             "lowest gap after (fine-tuned points)": cell(best.get("lowest_gap_after_finetune")), "Spearman ρ": cell(best["rho"])}
            for criterion, best in metrics["best"].items()]
    before = metrics.get("error_before_pruning")
    classification = metrics.get("task", "classification") == "classification"
    name, unit = ("Error", " %") if classification else ("RMSE", "")
    lead = "Errors are measured on the test split (the held-out validation images with `data.validation = true`). "
    lead += "" if before is None else f"{name} before pruning: {before:.4g}{unit}. "
    rho = metrics.get("spearman_rho")
    lead += (f"Gaps are {'errors' if classification else 'RMSEs'} minus the one before pruning"
             f"{', in points' if classification else ''}. Spearman's ρ over all fine-tuned points: "
             f"{'—' if rho is None else f'{rho:.3f}'} ({metrics.get('finetuned_points', '?')} points).")
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
    rows = [(c, loss, gap) for (c, _, _), loss, gap in zip(metrics["grid"], metrics["delta_loss"], metrics["gap_after_finetune"])
            if gap is not None and loss is not None]
    for criterion in dict.fromkeys(c for c, _, _ in rows):
        points = [(loss, gap) for c, loss, gap in rows if c == criterion]
        rho = metrics.get("best", {}).get(criterion, {}).get("rho")
        axis.scatter(*zip(*points), label=criterion + ("" if rho is None else f" (ρ = {rho:.2f})"))
    axis.set_xscale(_loss_scale(loss for _, loss, _ in rows))
    rho = metrics.get("spearman_rho")
    classification = metrics.get("task", "classification") == "classification"
    unit = "error gap after fine-tuning (points)" if classification else "RMSE gap after fine-tuning"
    axis.set(xlabel="ΔL(θ, Δθ) (training loss)", ylabel=unit,
             title="Gap after fine-tuning vs ΔL" + ("" if rho is None else f", ρ = {rho:.2f}"))
    if rows:
        axis.legend()
    save_figure(figure, path)
