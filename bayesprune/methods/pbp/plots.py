"""Plots of PBP runs (paper 000, section 6), from their metrics alone."""

from bayesprune.analysis.plots import plt, save_figure


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
