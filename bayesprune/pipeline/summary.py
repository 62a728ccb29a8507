"""A run's ``metrics.json``: several splits summarised as mean and standard error, several seeds as mean
and standard deviation, the sparsity where the error first grows by ``ERROR_MARGIN``, written as strict JSON."""

import json
import math
from pathlib import Path

import numpy as np

from bayesprune.core.files import write_text
from bayesprune.core.tasks import is_classification
from bayesprune.pipeline.evaluation import ERROR_MARGIN, ERROR_MARGIN_KEY, first_sparsity_worse_by, metric_name


def write_metrics(path: Path, metrics: dict):
    """``metrics.json`` as strict JSON: a NaN or infinite number (a mean over a diverged baseline)
    is written as null."""

    def strict(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {key: strict(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [strict(item) for item in value]
        return value

    write_text(path, json.dumps(strict(metrics), indent=2, allow_nan=False) + "\n")


def with_reference(config, metrics: dict) -> dict:
    """``metrics`` with, for classification, the sparsity at which the test error is first
    ``ERROR_MARGIN`` points above the full model's (null if never), and the ``[reference]`` numbers
    of this data set under ``reference``."""
    if is_classification(metrics["task"]):
        metrics[ERROR_MARGIN_KEY] = first_sparsity_worse_by(metrics["pruning_curve"], "test_error", ERROR_MARGIN)
    rows = config.reference.rows(config.data.options.get("name"))
    if rows:
        metrics["reference"] = {"source": config.reference.source, "rows": rows}
    return metrics


def _mean_and_stderr(values):
    values = np.asarray(values, dtype=float)
    return float(values.mean()), float(values.std() / np.sqrt(values.size))


_PER_RUN = ("method", "dataset", "task", "device", "architecture", "n_weights", "epochs", "seed", "score")


def summarise_splits(per_split: list) -> dict:
    """One split's metrics as they are; several splits as mean and standard error (std / sqrt(n)) of
    every numeric metric, training time summed."""
    if len(per_split) == 1:
        return per_split[0]
    first = per_split[0]
    name = metric_name(first["task"])
    metrics = {key: value for key, value in first.items() if key not in CURVES}
    metrics["splits"] = len(per_split)
    metrics["train_seconds"] = round(sum(m["train_seconds"] for m in per_split), 3)
    for key, value in first.items():
        if (
            key not in _PER_RUN
            and key != "train_seconds"
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
        ):
            metrics[key], stderr = _mean_and_stderr([m[key] for m in per_split])
            metrics[f"{key}_mean"], metrics[f"{key}_stderr"] = metrics[key], stderr
    curve = []
    for rows in zip(*(m["pruning_curve"] for m in per_split)):
        row = {key: rows[0][key] for key in ("droprate", "n_weights_kept", "sparsity", "sparsity_weights")}
        for key in rows[0]:
            if key.startswith(name):
                row[key], row[f"{key}_stderr"] = _mean_and_stderr([r[key] for r in rows])
        curve.append(row)
    metrics["pruning_curve"] = curve
    if "macs_curve" in first:
        metrics["macs_curve"] = [_splits_row(rows, name) for rows in zip(*(m["macs_curve"] for m in per_split))]
    metrics["per_split"] = [{key: m[key] for key in m if key.startswith(name)} for m in per_split]
    return metrics


#: The lists of rows a run's metrics hold: the pruning curve, and the points at MAC targets (``prune.macs``).
CURVES = ("pruning_curve", "macs_curve")


def _splits_row(rows, name: str) -> dict:
    """One point of several splits' MAC curves: the first split's, its metrics and MACs as mean and standard error."""
    row = dict(rows[0])
    for key in rows[0]:
        if key.startswith(name) or key in ("macs", "macs_fraction", "units_removed"):
            row[key], row[f"{key}_stderr"] = _mean_and_stderr([r[key] for r in rows])
    return row


def _seeds_row(rows, name: str) -> dict:
    """One point of several seeds' curves: the first seed's, its metrics (and a MAC curve's MACs) as mean
    and standard deviation."""
    row = dict(rows[0])
    for key in rows[0]:
        if (key.startswith(name) and not key.endswith("_stderr")) or key in ("macs", "macs_fraction", "units_removed"):
            values = np.array([r[key] for r in rows], dtype=float)
            row[key], row[f"{key}_std"] = float(values.mean()), float(values.std(ddof=1))
    return row


def summarise_seeds(runs: list, seeds) -> dict:
    """Runs repeated from several seeds: every number, every list of numbers (elementwise) and every
    point of the pruning curve as its mean (under its own name) and standard deviation (``_std``)."""
    first = runs[0]

    def numeric(value):
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    def numeric_list(key):
        values = [run.get(key) for run in runs]
        return all(
            isinstance(v, list) and v and all(numeric(x) for x in v) and len(v) == len(values[0]) for v in values
        )

    metrics = dict(first)
    for key, value in first.items():
        if key in _PER_RUN or key.endswith("_stderr") or key.endswith("_mean"):
            continue
        if numeric(value) and all(numeric(run.get(key)) for run in runs):
            values = np.array([run[key] for run in runs], dtype=float)
            metrics[key], metrics[f"{key}_std"] = float(values.mean()), float(values.std(ddof=1))
        elif key not in CURVES and numeric_list(key):
            values = np.array([run[key] for run in runs], dtype=float)
            metrics[key], metrics[f"{key}_std"] = values.mean(0).tolist(), values.std(0, ddof=1).tolist()
    for curve_key in CURVES:
        if curve_key in first:
            metrics[curve_key] = [
                _seeds_row(rows, metric_name(first["task"])) for rows in zip(*(r[curve_key] for r in runs))
            ]
    metrics["seeds"] = list(seeds)
    metrics["per_seed"] = [{key: run[key] for key in run if not isinstance(run[key], (list, dict))} for run in runs]
    return metrics


def result_line(metrics: dict, out, config) -> str:
    """The line ``bayesprune run`` prints for a finished run: the test metric of the network the user gets (fine-tuned where
    ``prune.finetune_epochs`` asked, the figure before beside it) and the plain network's."""
    metric = "test_error" if "test_error" in metrics else "test_rmse"
    baseline = metrics.get(f"baseline_{metric}")
    versus = "" if baseline is None else f" (plain network: {baseline:.4g})"
    value, tuned = metrics[metric], metrics.get(f"{metric}_finetuned")
    if isinstance(tuned, (int, float)):
        epochs = config.prune.finetune_epochs
        value = (
            f"{tuned:.4g} after fine-tuning {epochs} epoch{'s' if epochs != 1 else ''} "
            f"(prune.finetune_epochs; {value:.4g} before)"
        )
    else:
        value = f"{value:.4g}"
    return f"{metrics['dataset']}: {metric} {value}{versus}; results in {out}"
