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
    figure, axes = plt.subplots(1, len({r["alpha"] for r in records}), figsize=(5 * len({r["alpha"] for r in records}), 3.5),
                                squeeze=False)
    for axis, alpha in zip(axes[0], sorted({r["alpha"] for r in records})):
        rows = sorted((r for r in records if r["alpha"] == alpha), key=lambda r: r["target_sparsity"])
        sparsity = [r["target_sparsity"] for r in rows]
        axis.plot(sparsity, [100 * r["bound"] for r in rows], marker="o", label="bound on Q's error")
        axis.plot(sparsity, [r["posterior_test_error"] for r in rows], marker="o", label="Q test error")
        axis.plot(sparsity, [r["prior_test_error"] for r in rows], marker="o", label="P test error")
        axis.set(xlabel="sparsity", ylabel="error (%)", title=f"α = {alpha}")
        axis.legend()
    save_figure(figure, path)
