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
    axis.set(xlabel=score_name, ylabel="fraction of weights ≤ score", ylim=(0, 1.01),
             title=f"CDF of {score_name}s", **limits)
    if any(label is not None for label in curves):
        axis.legend()
    save_figure(figure, path)


def plot_pruning_curve(curve, metric, path, *, baseline=None, score_name="score"):
    """Test metric against droprate for the point estimate and, when present, the Monte-Carlo predictive."""
    rates = [100 * row["droprate"] for row in curve]
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(rates, [row[metric] for row in curve], "o-", label="point estimate")
    if f"{metric}_mc" in curve[0]:
        axis.plot(rates, [row[f"{metric}_mc"] for row in curve], "s--", label="MC predictive")
    if baseline is not None:
        axis.axhline(baseline, color="grey", linestyle=":", label="plain network")
    axis.set(xlabel="droprate (% of weights removed)", ylabel=metric.replace("_", " "), title=f"Pruning by {score_name}")
    axis.legend()
    save_figure(figure, path)


def plot_unit_gates(metrics: dict, units_path, theta_path):
    """Paper 004's Fig. 3 (hidden units alive and test error per epoch) and Fig. 4 (θ of every unit
    of the starting network per epoch, one panel per gated layer) from a unit-gates run's metrics."""
    epochs = np.arange(1, len(metrics["units_alive"]) + 1)
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(epochs, metrics["units_alive"], "-", color="C0")
    axis.set(xlabel="epoch", ylabel="hidden units alive", title="Units pruned while training")
    if metrics.get("epoch_test_error"):
        twin = axis.twinx()
        twin.plot(epochs, metrics["epoch_test_error"], "--", color="C1")
        twin.set_ylabel("test error (%)", color="C1")
    save_figure(figure, units_path)
    trajectories = metrics["theta_trajectories"]  # per epoch, per layer, per starting unit
    count = len(metrics["starting_architecture"])
    figure, axes = plt.subplots(1, count, figsize=(4 * count, 3.2), squeeze=False)
    for layer, axis in enumerate(axes[0]):
        theta = np.array([epoch[layer] for epoch in trajectories], dtype=float)
        axis.plot(epochs, theta, linewidth=0.6, alpha=0.6)
        axis.set(xlabel="epoch", ylabel="θ", ylim=(-0.02, 1.02), title=f"hidden layer {layer + 1}")
    save_figure(figure, theta_path)


def plot_remaining_ratio(ratios: dict, path):
    """The fraction of each layer's weights kept, site by site in network order (paper 002, Fig. 3)."""
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.bar(range(len(ratios)), list(ratios.values()))
    axis.set_xticks(range(len(ratios)), list(ratios), rotation=45, ha="right")
    axis.set(ylabel="remaining ratio", yscale="log", title="Weights kept per layer")
    save_figure(figure, path)
