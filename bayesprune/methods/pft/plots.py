"""Tables and plots of a PFT run (paper 000, section 2.1), from its ``metrics.json`` alone."""

from bayesprune.analysis.plots import plot_keep_probabilities, plt, save_figure
from bayesprune.analysis.tables import markdown_table


def pft_table(metrics: dict) -> str:
    """One row per (start mask, sparsity): the one-shot mask's test error after the same fine-tuning as PFT's
    (and after as many epochs as PFT's mask and fine-tuning stages together, when measured), PFT's, and
    the share of the start mask PFT kept."""
    # osp_equal_budget_test_error: the same numbers under their name before issue 27
    equal = metrics.get(
        "osp_equal_epochs_test_error", metrics.get("osp_equal_budget_test_error", [None] * len(metrics["grid"]))
    )
    rows = [
        {
            "start mask": criterion,
            "sparsity": sparsity,
            "OSP test error": osp,
            **({} if eq is None else {"OSP, PFT's epochs": eq}),
            "PFT test error": pft,
            "mask overlap": overlap,
        }
        for (criterion, sparsity), osp, eq, pft, overlap in zip(
            metrics["grid"], metrics["osp_test_error"], equal, metrics["pft_test_error"], metrics["mask_overlap"]
        )
    ]
    return markdown_table(rows, list(rows[0]))


def plot_pft(metrics: dict, folder):
    """``mask_overlap.png`` (Fig. 2 left), ``perturbation.png`` (Fig. 2 right) and ``keep_probabilities.png`` (Fig. 11)."""
    figure, axis = plt.subplots(figsize=(5, 3.5))
    for criterion in dict.fromkeys(c for c, _ in metrics["grid"]):
        points = [(s, overlap) for (c, s), overlap in zip(metrics["grid"], metrics["mask_overlap"]) if c == criterion]
        axis.plot(*zip(*points), marker="o", label=criterion)
    axis.set(
        xlabel="sparsity",
        ylabel="kept weights shared with the start mask",
        title="Mask overlap, start vs PFT",
        ylim=(0, 1.02),
    )
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
