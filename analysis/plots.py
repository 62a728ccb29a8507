"""Plots of a run, each written to a PNG file (matplotlib's non-interactive Agg backend)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def save_figure(figure, path):
    """Write ``figure`` to ``path`` as a PNG and close it; after a stop request (SIGINT, SIGTERM) it is
    closed unwritten and :func:`bayesprune.core.loop.check_stop` stops the report there, plot by plot."""
    from bayesprune.core.files import replacing
    from bayesprune.core.loop import check_stop

    try:
        check_stop("while drawing the report")
        figure.tight_layout()
        with replacing(path) as temporary:  # never through a link planted at ``path``
            figure.savefig(temporary, dpi=100)
    finally:
        plt.close(figure)


def plot_loss(losses, path):
    """Training loss per epoch (the negative ELBO for a variational method)."""
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(np.arange(1, len(losses) + 1), losses)
    axis.set(xlabel="epoch", ylabel="training loss", title="Training loss")
    save_figure(figure, path)


def plot_score_cdf(scores, path, *, score_name="score"):
    """Empirical CDF of the scores of all weights (for the sBNN: inclusion probabilities, paper 003, Figure 11)."""
    values = np.sort(np.asarray(scores).ravel())
    plot_inclusion_cdfs({None: (values, np.arange(1, values.size + 1) / values.size)}, path, score_name=score_name)


def plot_inclusion_cdfs(curves: dict, path, *, score_name="score"):
    """CDFs of scores, ``curves`` mapping a legend label (``None``: no legend) to
    ``(score values, fraction of weights ≤ score)``."""
    figure, axis = plt.subplots(figsize=(5, 3.5))
    for label, (values, fractions) in curves.items():
        axis.plot(values, fractions, label=label)
    probabilities = all(np.all((values >= 0) & (values <= 1)) for values, _ in curves.values())
    limits = {"xlim": (0, 1)} if probabilities else {}
    axis.set(
        xlabel=score_name, ylabel="fraction of weights ≤ score", ylim=(0, 1.01), title=f"CDF of {score_name}s", **limits
    )
    if any(label is not None for label in curves):
        axis.legend()
    save_figure(figure, path)


def plot_pruning_curve(curve, metric, path, *, baseline=None, score_name="score"):
    """Test metric against sparsity for the point estimate and, when present, the Monte-Carlo predictive."""
    rates = [100 * row["droprate"] for row in curve]
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(rates, [row[metric] for row in curve], "o-", label="point estimate")
    drawn = [(rate, row.get(f"{metric}_mc")) for rate, row in zip(rates, curve) if row.get(f"{metric}_mc") is not None]
    if drawn:  # prune.predictive = "unpruned": one point, at sparsity 0
        axis.plot(*zip(*drawn), "s--", label="MC predictive")
    if baseline is not None:
        axis.axhline(baseline, color="grey", linestyle=":", label="plain network")
    axis.set(
        xlabel="droprate (% of weights removed)", ylabel=metric.replace("_", " "), title=f"Pruning by {score_name}"
    )
    axis.legend()
    save_figure(figure, path)


def plot_keep_probabilities(histograms: dict, path):
    """Histograms of keep-probabilities λ over [0, 1] (counts per equal bin), one bar series per label."""
    figure, axis = plt.subplots(figsize=(5, 3.5))
    for label, counts in histograms.items():
        edges = np.linspace(0, 1, len(counts) + 1)
        axis.stairs(counts, edges, label=label)
    axis.set(xlabel="keep-probability λ", ylabel="weights", yscale="log", ylim=(0.5, None), title="Keep-probabilities")
    axis.legend()
    save_figure(figure, path)
