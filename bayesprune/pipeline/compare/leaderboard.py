"""The leaderboard of a comparison: per method and sparsity, the test error over seeds beside the plain
network's, the training time, and the size, MACs and latency of the pruned network; a plot of error
against sparsity with each method's Pareto front.

Every number is read from the cells' run directories (``metrics.json``; the network from
:func:`bayesprune.pipeline.runner.load_run`, pruned at the row's sparsity by :func:`bayesprune.core.pruning.prune`,
its removed units (unit level) and dead units taken out by :func:`bayesprune.core.export.export`), never from a
method's internals:
the parameters, MACs and latency are those of the exported, physically smaller network.
"""

import json
import math
from pathlib import Path

import numpy as np
import torch

from bayesprune.analysis.tables import markdown_table, write_csv
from bayesprune.core.files import replacing, write_text
from bayesprune.core.loop import check_stop
from bayesprune.core.tasks import metric_name
from bayesprune.pipeline.compare.cells import curve_metric

#: The leaderboard's columns, in order (the metric's name replaces ``test_error`` for regression; with
#: ``compare.cases``, a ``case`` column first).
COLUMNS = (
    "method",
    "sparsity",
    "achieved_sparsity",
    "test_error",
    "test_error_std",
    "plain_test_error",
    "start_test_error",
    "seeds",
    "train_seconds",
    "train_epochs",
    "train_steps",
    "params",
    "macs",
    "latency_ms",
    "bound",
    "cells",
    "failed",
)


def _weights(net) -> tuple:
    """``(non-zero, all)`` entries of the weight tensors (two or more dimensions: Linear, convolutions)."""
    tensors = [p for p in net.parameters() if p.dim() > 1]
    return sum(int(torch.count_nonzero(p)) for p in tensors), sum(p.numel() for p in tensors)


def pruned_network(cell, folder: Path, sparsity):
    """``(network, input_shape, dense_weights)``: the cell's network pruned at ``sparsity`` (``None``: as the
    method left it) with its dead units removed, one input's shape, and the weights of the full network."""
    from bayesprune.core.export import dead_units, export
    from bayesprune.core.pruning import bias_sites, prune
    from bayesprune.models import new_net
    from bayesprune.pipeline.runner import load_run

    config, dataset, fitted = load_run(folder)
    dense = _weights(new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed))[1]
    net = fitted.network()
    if sparsity is not None:
        budget = config.prune.budget(sparsity)
        scores = fitted.scores()
        if budget.level == "weight" and not config.prune.include_biases:
            biases = bias_sites(fitted.net)
            scores = {site: score for site, score in scores.items() if site not in biases}
        masks = prune(scores, budget, net=net, input_shape=tuple(dataset.input_shape))
        # unit level: the units removed from the network (attention heads too), not zeroed in it
        net = export(net, masks, input_shape=tuple(dataset.input_shape))
    shape = tuple(dataset.input_shape)
    try:
        dead = dead_units(net, input_shape=shape)
        net = export(net, dead, input_shape=shape) if dead else net
    except ValueError:  # a network Torch-Pruning cannot trace keeps its zeros
        pass
    return net.eval(), shape, dense


def measure(cell, folder: Path, sparsity, options) -> dict:
    """Size, achieved sparsity, MACs and latency (ms, median, one CPU thread) of the pruned network."""
    from bayesprune.core.export import count_macs, count_parameters, measure_latency

    net, shape, dense = pruned_network(cell, folder, sparsity)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seconds = measure_latency(
            net, shape, batch_sizes=(options.latency_batch,), repeats=options.latency_repeats, device="cpu"
        )[options.latency_batch]
    finally:
        torch.set_num_threads(threads)
    return {
        "achieved_sparsity": 1 - _weights(net)[0] / dense,
        "params": count_parameters(net)["nonzero"],
        "macs": count_macs(net, shape),
        "latency_ms": 1e3 * seconds,
    }


def _entries(cell, metrics: dict) -> list:
    """``(target sparsity, evaluated sparsity, test metric, training cost)`` of each leaderboard row of a cell:
    its pruning curve at the sparsity the row reads (:meth:`~bayesprune.pipeline.compare.cells.Cell.entries`),
    after ``prune.finetune_epochs`` of fine-tuning where its config asks for them, whose cost is counted."""
    name = metric_name(metrics.get("task", "classification"))
    finetune = cell.run_config().prune.finetune_epochs
    curve = {round(row["droprate"], 6): row[curve_metric(cell, name)] for row in metrics["pruning_curve"]}
    cost = _cost(metrics, finetune)
    return [(target, sparsity or None, curve[round(sparsity, 6)], cost) for target, sparsity in cell.entries()]


def _cost(metrics: dict, finetune: int = 0) -> dict:
    """A cell's training: seconds, epochs and optimiser steps over all its stages (``None`` where not
    recorded), and ``finetune`` epochs of one pruned network's fine-tuning (its steps as the run counted
    them, ``finetune_steps``, or, in a run that did not, at the fit's steps per epoch; its seconds are
    not recorded)."""
    cost = {key: metrics.get(key) for key in ("train_seconds", "train_epochs", "train_steps")}
    if finetune and "finetune_steps" in metrics and cost["train_steps"] is not None:
        cost["train_steps"] += metrics["finetune_steps"]
    elif finetune and cost["train_epochs"] and cost["train_steps"] is not None:
        cost["train_steps"] += finetune * cost["train_steps"] // cost["train_epochs"]
    if finetune and cost["train_epochs"] is not None:
        cost["train_epochs"] += finetune
    return cost


def _mean(values):
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def leaderboard_rows(cells: list, folders: list, options, results=None) -> list:
    """One row per method and target sparsity (and ``compare.cases`` case: a ``case`` column first), averaged over
    seeds (see :data:`COLUMNS`); ``results`` (:func:`~bayesprune.pipeline.compare.engines.run_cells`) marks the cells
    that failed, whose reasons fill the row's ``failed`` column while the other seeds' numbers fill the rest."""
    found = {}
    plain = {}  # (case, seed) → the plain network's metric
    failed = {}  # (case, method, sparsity) → reasons
    folder_names = {}
    certified = {}  # (case, method, sparsity, seed) → the bound of PBP started from that method's mask
    name = "test_error"
    references = set()  # the rows of the cells that gave the plain network's metric: listed first
    for index, (cell, folder) in enumerate(zip(cells, folders)):
        result = None if results is None else results[index]
        if result is not None and "failed" in result:
            for target, _ in cell.entries() if cell.row else []:
                failed.setdefault((cell.case, cell.label, target), []).append(f"{cell.name}: {result['failed']}")
                folder_names.setdefault((cell.case, cell.label, target), []).append(f"cells/{cell.name}")
            continue
        metrics = json.loads((Path(folder) / "metrics.json").read_text())
        for method in cell.certifies:
            certified[(cell.case, method, cell.sparsity, cell.seed)] = metrics["bound"]
        if not cell.row:
            continue
        name = metric_name(metrics.get("task", "classification"))
        if f"baseline_{name}" in metrics:  # a cell whose fit is the plain network (magnitude's) reports it
            plain[(cell.case, cell.seed)] = metrics[f"baseline_{name}"]
            references.add(cell.label)
        for target, evaluated, value, cost in _entries(cell, metrics):
            check_stop("while measuring the leaderboard; every cell is kept, --resume writes it")
            folder_names.setdefault((cell.case, cell.label, target), []).append(f"cells/{cell.name}")
            found.setdefault((cell.case, cell.label, target), []).append(
                {
                    "seed": cell.seed,
                    name: value,
                    "start": metrics.get(f"start_{name}"),  # the network the fit started from (model.weights)
                    "bound": metrics.get("bound"),
                    **cost,
                    **measure(cell, Path(folder), evaluated, options),
                }
            )
    for (case, method, target), entries in found.items():
        for entry in entries:
            entry["bound"] = certified.get((case, method, target, entry["seed"]), entry["bound"])
    rows = []
    cases = list(dict.fromkeys(cell.case for cell in cells))
    for key in dict.fromkeys([*found, *failed]):
        case, method, target = key
        entries = found.get(key, [])
        values = [entry[name] for entry in entries]
        rows.append(
            {
                **({"case": case} if case else {}),
                "method": method,
                "sparsity": target,
                "achieved_sparsity": _mean(entry["achieved_sparsity"] for entry in entries),
                name: float(np.mean(values)) if values else None,
                f"{name}_std": float(np.std(values, ddof=1)) if len(values) > 1 else None,
                f"plain_{name}": _mean(plain.get((case, entry["seed"])) for entry in entries),
                f"start_{name}": _mean(entry["start"] for entry in entries),
                "seeds": len(entries),
                **{
                    key: _mean(entry[key] for entry in entries)
                    for key in ("train_seconds", "train_epochs", "train_steps", "params", "macs", "latency_ms", "bound")
                },
                "cells": " ".join(folder_names[key]),
                "failed": "; ".join(failed.get(key, [])) or None,
            }
        )
    return sorted(
        rows,
        key=lambda row: (
            cases.index(row.get("case", "")),
            row["method"] not in references,
            row["method"],
            row["sparsity"] or -1,
        ),
    )


def _format(value, key):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if key in ("sparsity", "achieved_sparsity"):
        return f"{100 * value:.1f} %"
    if key in ("params", "macs"):
        return f"{round(value):,}"
    if key == "bound":
        return f"{value:.4f}"
    if isinstance(value, float):
        return f"{value:.2f}" if key != "latency_ms" else f"{value:.3f}"
    return str(value)


def write_leaderboard(out: Path, rows: list):
    """``leaderboard.csv`` (every number as measured), ``leaderboard.md`` (rounded, sparsities in percent,
    ``learned`` for a method that sets its own width) and ``leaderboard.png``."""
    out = Path(out)
    write_csv(
        out / "leaderboard.csv", [{key: "" if value is None else value for key, value in row.items()} for row in rows]
    )
    shown = []
    for row in rows:
        item = {key: _format(value, key) for key, value in row.items()}
        if row["sparsity"] is None:
            item["sparsity"] = "learned"
        shown.append(item)
    name = next((key for key in rows[0] if key in ("test_error", "test_rmse")), "test_error") if rows else "test_error"
    text = [
        "# Leaderboard",
        "",
        f"Per {'case, ' * any('case' in row for row in rows)}method and target sparsity: {name} (mean and standard deviation over seeds) of the pruned network, the "
        "plain network's, the start network's (the one each fit started from), training seconds, and the pruned network (dead units removed): non-zero parameters, "
        "MACs of one input, median CPU latency of one batch on one thread; `bound`: a PAC-Bayes certificate "
        "(PBP's own, and with compare.certify, PBP's posterior started from the method's mask fitted on S_P).",
        "",
        markdown_table(shown),
        "",
        "![test error against sparsity](leaderboard.png)",
        "",
    ]
    write_text(out / "leaderboard.md", "\n".join(text))
    plot_leaderboard(rows, out / "leaderboard.png", metric=name)


def pareto_front(points: list) -> list:
    """The points (sparsity, error) that no other point beats in both (more sparsity, less error), by sparsity."""
    front = [p for p in points if not any(q[0] >= p[0] and q[1] <= p[1] and q != p for q in points)]
    return sorted(set(front))


def plot_leaderboard(rows: list, path: Path, *, metric: str = "test_error"):
    """Test error against achieved sparsity, in percent: each method's points, its Pareto front as a line,
    and the plain network's error as a dashed line (with ``compare.cases``, each case's methods and plain
    network apart)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    series = list(dict.fromkeys((row.get("case", ""), row["method"]) for row in rows))
    colours = plt.get_cmap("tab10")
    plain = [row[f"plain_{metric}"] for row in rows if row.get(f"plain_{metric}") is not None]
    values = [row[metric] for row in rows if row["achieved_sparsity"] is not None]
    # Errors far above the plain network's would flatten every other line: the axis stops at 4x it
    # and a clipped point is drawn on the top edge, its value in the legend.
    top = max(values) * 1.05 if not plain or not values else min(max(values) * 1.05, 4 * float(np.mean(plain)))
    for index, (case, method) in enumerate(series):
        mine = [
            row
            for row in rows
            if (row.get("case", ""), row["method"]) == (case, method) and row["achieved_sparsity"] is not None
        ]
        points = [(100 * row["achieved_sparsity"], row[metric]) for row in mine]
        errors = [row.get(f"{metric}_std") or 0.0 for row in mine]
        colour = colours(index % 10)
        shown = [(x, min(y, top)) for x, y in points]
        axes.errorbar(
            [p[0] for p in shown],
            [p[1] for p in shown],
            yerr=errors,
            fmt="o",
            color=colour,
            markerfacecolor="none",
            capsize=2,
            alpha=0.8,
        )
        front = [(x, min(y, top)) for x, y in pareto_front(points)]
        clipped = ", ".join(f"{y:.3g} at {x:.0f} %" for x, y in points if y > top)
        axes.plot(
            [p[0] for p in front],
            [p[1] for p in front],
            marker="o",
            color=colour,
            linewidth=1.8,
            linestyle=("-", "--", "-.", ":")[index // 10 % 4],
            label=(f"{case}: " if case else "") + method + (f" (off the chart: {clipped})" if clipped else ""),
        )
    for index, case in enumerate(dict.fromkeys(case for case, _ in series)):
        own = [row[f"plain_{metric}"] for row in rows if row.get("case", "") == case and row.get(f"plain_{metric}")]
        if own:
            label = "plain network (dense)" + (f": {case}" if case else "")
            axes.axhline(
                float(np.mean(own)), color="grey", linestyle=("--", ":", "-.")[index % 3], linewidth=1, label=label
            )
    axes.set_ylim(0, top)
    axes.set_xlabel("sparsity (% of weights removed)")
    axes.set_ylabel("test error (%)" if metric == "test_error" else "test RMSE")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="upper left")
    axes.set_title(
        "Error against sparsity (hollow: every point; line: each method's Pareto front; "
        "clipped points' values in the legend)",
        fontsize=9,
    )
    figure.tight_layout()
    with replacing(path) as temporary:
        figure.savefig(temporary, dpi=130)
    plt.close(figure)
