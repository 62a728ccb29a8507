"""The leaderboard at equal MACs (``prune.macs``): per method and MAC target, the rows every run's
``macs_curve`` holds (its network cut by its unit scores to at most the target's share of the dense MACs,
:func:`bayesprune.core.macs.resolve_macs`; a method that prunes to the target in its fit, its
:attr:`~bayesprune.methods.Method.macs_option`, already there), averaged over seeds, with the parameters and median CPU latency of that
network once its units are physically removed (:func:`bayesprune.core.export.export`).
"""

import copy
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from bayesprune.analysis.tables import markdown_table, write_csv
from bayesprune.core.files import write_text
from bayesprune.core.tasks import metric_name
from bayesprune.methods import get_method

#: The columns, in order (the metric's name replaces ``test_error`` for regression; with ``compare.cases``, a
#: ``case`` column first).
COLUMNS = ("method", "macs_target", "macs", "macs_fraction", "params", "test_error", "test_error_finetuned")


def network_at(folder: Path, target: float, dense_macs: int):
    """``(network, input_shape)``: the run's network cut to ``target · dense_macs`` MACs by its unit scores,
    its removed units taken out."""
    from bayesprune.core.export import export
    from bayesprune.core.macs import resolve_macs
    from bayesprune.core.pruning import Budget, prune
    from bayesprune.pipeline.rundir import load_run

    config, dataset, fitted = load_run(folder)
    shape, net, scores = tuple(dataset.input_shape), fitted.network(), fitted.scores()
    budget = Budget(macs=target, dense_macs=dense_macs, level="unit", min_keep=config.prune.min_keep)
    keep, _ = resolve_macs(scores, budget, net, input_shape=shape)
    masks = prune(scores, keep, net=net, input_shape=shape)
    return export(net, masks, input_shape=shape).eval(), shape


def _measured(folder: Path, target: float, dense_macs: int, options) -> dict:
    from bayesprune.core.export import count_parameters, measure_latency

    net, shape = network_at(folder, target, dense_macs)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        batch = options.latency_batch
        seconds = measure_latency(net, shape, batch_sizes=(batch,), repeats=options.latency_repeats, device="cpu")
    finally:
        torch.set_num_threads(threads)
    return {"params": count_parameters(net)["nonzero"], "latency_ms": 1e3 * seconds[batch]}


def macs_rows(cells: list, folders: list, options, results=None) -> list:
    """One row per method (each ``compare.variants`` row apart) and ``prune.macs`` target (and ``compare.cases``
    case) over the cells that finished with a ``macs_curve`` (see :data:`COLUMNS`, with ``latency_ms``, ``seeds``
    and the ``cells``)."""
    found = {}
    for index, (cell, folder) in enumerate(zip(cells, folders)):
        metrics_file = Path(folder) / "metrics.json"
        if (results is not None and "failed" in results[index]) or not cell.row or not metrics_file.is_file():
            continue
        metrics = json.loads(metrics_file.read_text())
        name = metric_name(metrics.get("task", "classification"))
        for row in metrics.get("macs_curve", []):
            entry = {key: row.get(key) for key in ("macs", "macs_fraction", name, f"{name}_finetuned")}
            entry.update(_measured(Path(folder), row["macs_target"], metrics["macs_dense"], options))
            found.setdefault((cell.case, cell.label, row["macs_target"]), []).append((cell.name, entry))
    cases = list(dict.fromkeys(cell.case for cell in cells))
    rows = []
    for (case, method, target), entries in sorted(found.items(), key=lambda item: (cases.index(item[0][0]), item[0])):
        keys = [key for key in entries[0][1] if all(e[key] is not None for _, e in entries)]
        rows.append(
            {
                **({"case": case} if case else {}),
                "method": method,
                "macs_target": target,
                **{key: float(np.mean([e[key] for _, e in entries])) for key in keys},
                "seeds": len(entries),
                "cells": " ".join(f"cells/{cell}" for cell, _ in entries),
            }
        )
    return rows


def write_macs_table(out: Path, rows: list):
    """``leaderboard-macs.csv`` (every number as measured) and ``leaderboard-macs.md``."""
    write_csv(Path(out) / "leaderboard-macs.csv", rows)
    shown = [
        {
            key: f"{100 * value:.1f} %"
            if key in ("macs_target", "macs_fraction")
            else f"{round(value):,}"
            if key in ("macs", "params")
            else f"{value:.3f}"
            if isinstance(value, float)
            else str(value)
            for key, value in row.items()
        }
        for row in rows
    ]
    text = [
        "# Leaderboard at equal MACs",
        "",
        f"Per {'case, ' * any('case' in row for row in rows)}method and `prune.macs` target (mean over seeds): the MACs of one input and their share of the dense "
        "network's, non-zero parameters, test error before and after fine-tuning, median CPU latency of one batch "
        "on one thread, of each run's network cut to the target by its unit scores and physically smaller.",
        "",
        markdown_table(shown),
        "",
    ]
    write_text(Path(out) / "leaderboard-macs.md", "\n".join(text))


def at_macs(cells: list) -> list:
    """``prune.macs``: a cell of a method that prunes to a MAC fraction in its fit (its
    :attr:`~bayesprune.methods.Method.macs_option`) becomes one cell per target, that option set to it and
    ``prune.macs`` to it alone, so that every row stands at the targets' MACs (a method without one is
    cut to them after its fit); its cells at other sparsities, which would give the same fit, are dropped."""
    out, seen = [], set()
    for cell in cells:
        option = get_method(cell.method).macs_option
        targets = cell.config.get("prune", {}).get("macs")
        if option is None or targets is None:
            out.append(cell)
            continue
        for target in targets if isinstance(targets, (list, tuple)) else [targets]:
            if (cell.label, target, cell.seed) in seen:
                continue
            seen.add((cell.label, target, cell.seed))
            config = copy.deepcopy(cell.config)
            config[cell.method][option] = target
            config["prune"].update(macs=[target], sparsities=[0.0])
            name = f"{cell.label}-m{target:g}-seed{cell.seed}"
            out.append(replace(cell, name=name, config=config, sparsity=None, sparsities=()))
    return out
