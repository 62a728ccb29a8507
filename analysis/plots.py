"""Plots of a run, each written to a PNG file (matplotlib's non-interactive Agg backend)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def save_figure(figure, path):
    """Write ``figure`` to ``path`` as a PNG and close it."""
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_elbo(elbo, path):
    """ELBO per epoch."""
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(np.arange(1, len(elbo) + 1), elbo)
    axis.set(xlabel="epoch", ylabel="ELBO", title="ELBO trace")
    save_figure(figure, path)


def plot_inclusion_cdf(probabilities, path):
    """Empirical CDF of the inclusion probabilities of all weights (paper 003, Figure 11)."""
    values = np.sort(np.asarray(probabilities).ravel())
    plot_inclusion_cdfs({None: (values, np.arange(1, values.size + 1) / values.size)}, path)


def plot_inclusion_cdfs(curves: dict, path):
    """CDFs of inclusion probabilities, ``curves`` mapping a legend label (``None``: no legend) to
    ``(p values, fraction of weights ≤ p)``."""
    figure, axis = plt.subplots(figsize=(5, 3.5))
    for label, (values, fractions) in curves.items():
        axis.plot(values, fractions, label=label)
    axis.set(xlabel="inclusion probability p", ylabel="fraction of weights ≤ p", xlim=(0, 1), ylim=(0, 1.01),
             title="CDF of inclusion probabilities")
    if any(label is not None for label in curves):
        axis.legend()
    save_figure(figure, path)


def plot_pruning_curve(curve, metric, path, *, baseline=None):
    """Test metric against droprate for the posterior mean and the Monte-Carlo predictive."""
    rates = [100 * row["droprate"] for row in curve]
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(rates, [row[metric] for row in curve], "o-", label="posterior mean")
    axis.plot(rates, [row[f"{metric}_mc"] for row in curve], "s--", label="MC predictive")
    if baseline is not None:
        axis.axhline(baseline, color="grey", linestyle=":", label="plain network")
    axis.set(xlabel="droprate (% of weights removed)", ylabel=metric.replace("_", " "), title="Pruning by inclusion probability")
    axis.legend()
    save_figure(figure, path)
