"""Plots of a ProbMask run (paper 002, Fig. 3), from its ``metrics.json`` alone."""

from bayesprune.analysis.plots import plt, save_figure


def plot_remaining_ratio(ratios: dict, path):
    """The fraction of each layer's weights kept, site by site in network order (paper 002, Fig. 3)."""
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.bar(range(len(ratios)), list(ratios.values()))
    axis.set_xticks(range(len(ratios)), list(ratios), rotation=45, ha="right")
    axis.set(ylabel="remaining ratio", yscale="log", title="Weights kept per layer")
    save_figure(figure, path)
