"""Plots of a unit-gates run (paper 004, Figs. 3-4), from its ``metrics.json`` alone."""

import numpy as np

from bayesprune.analysis.plots import plt, save_figure


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
