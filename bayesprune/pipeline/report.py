"""``report.md`` and its plots, regenerated from the files of a run directory alone."""

import csv
import json
import math
from pathlib import Path

import numpy as np

from bayesprune.analysis.diagnostics import METHOD_ATTRIBUTE, plot_diagnostics
from bayesprune.analysis.tables import format_value, markdown_table, markdown_text
from bayesprune.core.errors import BayesPruneError
from bayesprune.core.files import all_or_nothing, arrays_digest, read_npz, write_text
from bayesprune.methods import available_methods
from bayesprune.methods.metrics import check_metrics_keys
from bayesprune.pipeline.evaluation import ERROR_MARGIN, ERROR_MARGIN_KEY, first_sparsity_worse_by, metric_name
from bayesprune.pipeline.reading import reading as _reading
from bayesprune.pipeline.report_importance import _importance_files, pooled_importance_sections


def report(run_dir) -> Path:
    """``bayesprune report RUN_DIR`` as a library call: :func:`write_report` of a run directory of a single
    fit, refused in one line (:class:`~bayesprune.core.errors.BayesPruneError`) for any other folder.
    Returns the path of ``report.md``."""
    run_dir = Path(run_dir)
    for names in (("metrics.json",), ("history.csv", "elbo.csv"), ("scores.npz", "inclusion_probabilities.npz")):
        if not any((run_dir / name).is_file() for name in names):
            raise BayesPruneError(f"{run_dir}: not a run directory of a single fit (no {names[0]})")
    return write_report(run_dir)


def write_report(run_dir) -> Path:
    """Write ``report.md`` with ``loss.png``, ``score_cdf.png`` and ``pruning_curve.png`` into ``run_dir``.

    It reads ``metrics.json``, ``history.csv`` and ``scores.npz`` (``elbo.csv`` and
    ``inclusion_probabilities.npz`` in run directories of earlier versions), whatever the method.
    When the run has a ``posterior.nc``, the report adds its ArviZ diagnostics: ``az.summary`` of
    the pooled feature importance ψ of the restarts with its selection (:func:`~bayesprune.analysis.importance.pooled_importance_of`), ``forest_psi.png``, ``ppc.png``, and a per-chain CDF of
    inclusion probabilities in place of the first chain's score CDF.
    """
    run_dir = Path(run_dir)
    metrics = read_metrics(run_dir)
    # a tampered file, whatever else it breaks, is one line naming it, and leaves the folder as it was
    with _reading(run_dir / "metrics.json"), all_or_nothing(run_dir):
        return _write_report(run_dir, metrics)


def _write_report(run_dir: Path, metrics: dict) -> Path:
    from bayesprune.analysis.plots import plot_loss, plot_pruning_curve, plot_score_cdf  # matplotlib: not at start

    losses = read_losses(run_dir)
    scores = read_scores(run_dir)
    if SCORES_DIGEST in metrics and arrays_digest(scores) != metrics[SCORES_DIGEST]:
        raise BayesPruneError(
            f"{run_dir / 'scores.npz'}: not the scores metrics.json records (one of the two comes from another run)"
        )
    posterior = read_posterior(run_dir, metrics["method"], scores) if (run_dir / "posterior.nc").exists() else None
    metric = metric_name(metrics["task"])
    baseline = metrics.get(f"baseline_{metric}")
    score_name = metrics.get("score", "inclusion probability")
    if not isinstance(score_name, str):
        score_name = "score"

    plot_loss(losses, run_dir / "loss.png")
    diagnostics = [] if posterior is None else _diagnostics(run_dir, posterior)
    # The CDF of ranks is the diagonal whatever the run: only scores that are values say something.
    score_plot = not diagnostics and "rank" not in score_name
    if score_plot:
        plot_score_cdf(
            np.concatenate([value.ravel() for value in scores.values()]),
            run_dir / "score_cdf.png",
            score_name=score_name,
        )
    curve_plot = len(metrics["pruning_curve"]) > 1
    if curve_plot:
        plot_pruning_curve(
            metrics["pruning_curve"], metric, run_dir / "pruning_curve.png", baseline=baseline, score_name=score_name
        )

    unit = " (%)" if metric == "test_error" else ""
    summary = [
        ("method", metrics["method"]),
        ("dataset", metrics["dataset"]),
        ("architecture", metrics["architecture"]),
        ("device", metrics["device"]),
        ("weights", metrics["n_weights"]),
        ("epochs", metrics["epochs"]),
        ("training time (s)", metrics["train_seconds"]),
        (f"{metric}{unit}, point estimate", f"{metrics[metric]:.4g}"),
        *([(f"{metric}{unit}, MC predictive", f"{metrics[metric + '_mc']:.4g}")] if metric + "_mc" in metrics else []),
        (f"{metric}{unit}, plain network", "—" if baseline is None else f"{baseline:.4g}"),
        *(
            [(f"{metric}, linear model (least squares)", f"{metrics[f'baseline_linear_{metric}']:.4g}")]
            if metrics.get(f"baseline_linear_{metric}") is not None
            else []
        ),
        *(
            (key.replace("_", " "), format_value(value))
            for key, value in metrics.items()
            if key not in _SHOWN and not isinstance(value, (list, dict))
        ),
    ]
    curve, columns = _curve_with_reference(metrics, metric)
    shown = markdown_text(score_name)  # what the report copies from metrics.json is text, never markdown
    text = "\n\n".join(
        [
            f"# bayesprune run: {markdown_text(metrics['method'])} on {markdown_text(metrics['dataset'])}",
            "| quantity | value |\n|---|---|\n"
            + "\n".join(f"| {markdown_text(k)} | {markdown_text(v)} |" for k, v in summary),
            f"## Pruning by {shown}\n\n{_pruned_sentence(run_dir, shown)} Sparsity counts all "
            "parameters; `sparsity_weights` leaves the biases out."
            + _statistics_sentence(metrics)
            + _predictive_sentence(metrics, metric),
            markdown_table(curve, columns),
            *_error_margin_line(metrics),
            *(["![test metric against sparsity](pruning_curve.png)"] if curve_plot else []),
            *([f"## Scores\n\n![CDF of the {shown} of every weight](score_cdf.png)"] if score_plot else []),
            "## Optimisation\n\n![training loss per epoch](loss.png)",
            *(_importance_files(run_dir) if (run_dir / "importance.png").exists() else []),
            *diagnostics,
            *_method_sections(run_dir, metrics),
        ]
    )
    path = run_dir / "report.md"
    write_text(path, text + "\n")
    return path


def _predictive_sentence(metrics: dict, metric: str) -> str:
    """Where the Monte-Carlo predictive was left out of the curve (``prune.predictive``), said."""
    if not any(row.get(f"{metric}_mc", 0) is None for row in metrics["pruning_curve"]):
        return ""
    return (
        f" The Monte-Carlo predictive (`{metric}_mc`) was evaluated on the unpruned model only "
        '(`prune.predictive`; `"every"` evaluates it at every sparsity).'
    )


def _statistics_sentence(metrics: dict) -> str:
    """What the masked networks' batch-norm statistics were (nothing for a network without batch norm)."""
    if "recalibrated_statistics" not in metrics:
        return ""
    if metrics["recalibrated_statistics"]:
        return (
            " The batch-norm statistics of every masked network are estimated again on training batches "
            "before it is scored (`prune.recalibrate`)."
        )
    return (
        " Every masked network is scored with the batch-norm statistics of the dense network "
        "(`prune.recalibrate = false`): stale, they can make a pruned network look far worse than it is."
    )


def _method_sections(run_dir: Path, metrics: dict) -> list:
    method = available_methods().get(metrics["method"])
    return [] if method is None else method().report_sections(run_dir, metrics)


def _curve_with_reference(metrics: dict, metric: str):
    """The pruning curve's rows and columns, with the ``[reference]`` value at each sparsity it gives
    (the paper's rows at other sparsities are appended)."""
    curve = [dict(row) for row in metrics["pruning_curve"]]
    columns = [
        c
        for c in (
            "droprate",
            "sparsity",
            "sparsity_weights",
            "n_weights_kept",
            metric,
            f"{metric}_mc",
            f"{metric}_finetuned",
        )
        if c in curve[0]
    ]
    reference = metrics.get("reference")
    if not reference:
        return curve, columns
    source = reference["source"]
    by_rate = {round(row["droprate"], 6): row for row in curve}
    for row in reference["rows"]:
        rate = round(row["droprate"], 6)
        if rate not in by_rate:
            by_rate[rate] = {"droprate": row["droprate"]}
        by_rate[rate][source] = row["value"]
    rows = [{column: by_rate[rate].get(column, "—") for column in [*columns, source]} for rate in sorted(by_rate)]
    return rows, [*columns, source]


def _error_margin_line(metrics: dict) -> list:
    if ERROR_MARGIN_KEY not in metrics:
        return []
    found = metrics[ERROR_MARGIN_KEY]
    text = (
        f"Sparsity at which the test error first exceeds the full model's by {ERROR_MARGIN:g} points: "
        f"{'not reached' if found is None else f'{found:.4g}'}"
    )
    reference = metrics.get("reference")
    if reference and reference["rows"][0]["droprate"] == 0:
        paper = first_sparsity_worse_by(reference["rows"], "value", ERROR_MARGIN, key="droprate")
        text += f" ({markdown_text(reference['source'])}: {'not reached' if paper is None else f'{paper:.4g}'})"
    return [text + "."]


#: The key of ``metrics.json`` holding the digest of the run's ``scores.npz`` arrays
#: (:func:`~bayesprune.core.files.arrays_digest`): a report refuses a scores.npz, or a metrics.json, of another run.
SCORES_DIGEST = "scores_sha256"
REQUIRED_METRICS = (
    "method",
    "dataset",
    "task",
    "architecture",
    "device",
    "n_weights",
    "epochs",
    "train_seconds",
    "pruning_curve",
)


def read_metrics(run_dir: Path) -> dict:
    """``metrics.json``, with the keys a report needs."""
    path = run_dir / "metrics.json"
    with _reading(path):
        metrics = json.loads(path.read_text())
        if not isinstance(metrics, dict):
            raise ValueError("not a JSON object")
        missing = [key for key in REQUIRED_METRICS if key not in metrics]
        if missing:
            raise ValueError(f"missing key {missing[0]!r}")
        _check_metrics(metrics)
        method = available_methods().get(metrics["method"])
        if method is not None:
            check_metrics_keys(method, metrics)
        written_by = _config_method(run_dir)
        if written_by is not None and metrics["method"] != written_by:
            raise ValueError(f"written by method {metrics['method']!r}, but the run's config.toml has {written_by!r}")
        if not isinstance(metrics.get(SCORES_DIGEST, ""), str):
            raise ValueError(f"{SCORES_DIGEST!r} is not a string")
    return metrics


def _pruned_sentence(run_dir: Path, shown: str) -> str:
    """What the pruning curve removes at the run's ``prune.level``: weights set to zero, or whole units."""
    if _config_table(run_dir).get("prune", {}).get("level") != "unit":
        return f"Weights are ranked globally by their {shown} and the lowest fraction (the sparsity) is set to zero."
    return (
        f"Units (channels, attention heads, hidden neurons) are ranked by their {shown} and the lowest fraction "
        "(the sparsity) is removed from the network, each with the weights that feed it and those that read it "
        "(a layer keeps its floor, `prune.min_keep`)."
    )


def _config_method(run_dir: Path):
    """The ``method`` of the run's ``config.toml`` (``None`` without one, or for an experiment)."""
    config = _config_table(run_dir)
    if "experiment" in config and config["experiment"].get("name"):
        return None
    method = config.get("method")
    return method if isinstance(method, str) else None


def _config_table(run_dir: Path) -> dict:
    """The run's ``config.toml`` as read (``{}`` without one)."""
    import tomllib

    path = run_dir / "config.toml"
    if not path.is_file():
        return {}
    with _reading(path):
        return tomllib.loads(path.read_text())


def _number(value) -> bool:
    """A finite int or float (JSON's NaN and Infinity are no number bayesprune writes)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(value) -> bool:
    return _number(value) and value >= 0 and value == int(value)


def _check_metrics(metrics: dict):
    """Raise ``ValueError`` naming the first key of ``metrics`` whose value is not of the type bayesprune
    writes, before any plot or text is written from them."""
    for key in ("method", "dataset", "task", "architecture", "device", "score"):
        if key in metrics and not isinstance(metrics[key], str):
            raise ValueError(f"{key!r} is not a string")
    if metrics["task"] not in ("classification", "regression"):
        raise ValueError(f"'task' is {metrics['task']!r}, not classification or regression")
    metric = metric_name(metrics["task"])
    for key in ("n_weights", "epochs", "train_seconds", metric):
        if not _number(metrics.get(key)):
            raise ValueError(f"{key!r} is missing or not a number")
    for key in ("n_weights", "epochs"):
        if not _count(metrics[key]):
            raise ValueError(f"{key!r} is {metrics[key]!r}, not a count")
    if metrics[metric] < 0 or metrics["train_seconds"] < 0:
        raise ValueError(f"{metric!r} or 'train_seconds' is negative")
    if "recalibrated_statistics" in metrics and not isinstance(metrics["recalibrated_statistics"], bool):
        raise ValueError("'recalibrated_statistics' is not true or false")
    for key in (f"baseline_{metric}", f"baseline_linear_{metric}", f"{metric}_mc", ERROR_MARGIN_KEY):
        if metrics.get(key) is not None and not _number(metrics[key]):
            raise ValueError(f"{key!r} is not a number")
    curve = metrics["pruning_curve"]
    if not isinstance(curve, list) or not curve or not all(isinstance(row, dict) for row in curve):
        raise ValueError("'pruning_curve' is not a non-empty list of rows")
    for row in curve:
        if set(row) != set(curve[0]) or not all(_number(value) or value is None for value in row.values()):
            raise ValueError("'pruning_curve' has ragged rows or values that are not numbers")
        if not _number(row.get("droprate")):
            raise ValueError("'pruning_curve' has a row without a droprate")
        if not all(
            0 <= row[key] <= 1 for key in ("droprate", "sparsity", "sparsity_weights") if row.get(key) is not None
        ):
            raise ValueError("'pruning_curve' has a droprate or sparsity outside [0, 1]")
    sparsities = [row["droprate"] for row in curve]
    if sparsities != sorted(set(sparsities)):
        raise ValueError("'pruning_curve' is not in increasing order of droprate")
    reference = metrics.get("reference")
    if reference is not None:
        rows = reference.get("rows") if isinstance(reference, dict) else None
        if not (
            isinstance(rows, list)
            and rows
            and isinstance(reference.get("source"), str)
            and all(
                isinstance(row, dict) and _number(row.get("droprate")) and _number(row.get("value")) for row in rows
            )
        ):
            raise ValueError("'reference' is not a source and rows of droprate and value")


def read_losses(run_dir: Path) -> list:
    """Training loss per epoch from ``history.csv`` (or the negated ELBO of an older ``elbo.csv``)."""
    new = (run_dir / "history.csv").is_file()
    path = run_dir / ("history.csv" if new else "elbo.csv")
    with _reading(path), open(path, newline="") as handle:
        losses = [float(row["loss"]) if new else -float(row["elbo"]) for row in csv.DictReader(handle)]
        if not losses:
            raise ValueError("no epochs")
        if not all(math.isfinite(loss) for loss in losses):  # a fit whose loss was not finite is refused, never written
            raise ValueError("a loss that is not a finite number")
    return losses


def read_scores(run_dir: Path) -> dict:
    """Site name → score array from ``scores.npz`` (or an older ``inclusion_probabilities.npz``)."""
    path = run_dir / "scores.npz"
    if not path.is_file():
        path = run_dir / "inclusion_probabilities.npz"
    with _reading(path):
        return read_npz(path)


_SHOWN = {
    "method",
    "dataset",
    "task",
    "device",
    "architecture",
    "n_weights",
    "epochs",
    "seed",
    "train_seconds",
    "score",
    "chains",
    "test_error",
    "test_error_mc",
    "test_rmse",
    "test_rmse_mc",
    "baseline_test_error",
    "baseline_test_rmse",
    "baseline_linear_test_rmse",
    "reference",
    "recalibrated_statistics",
    ERROR_MARGIN_KEY,
}


def read_posterior(run_dir: Path, method: str, scores: dict):
    """``posterior.nc`` of a run of ``method``, checked against it: written by that method
    (:func:`~bayesprune.analysis.diagnostics.write_posterior` stamps it), and every variable named
    after a site of ``scores`` of that site's shape."""
    import arviz as az

    path = run_dir / "posterior.nc"
    with _reading(path):
        idata = az.from_netcdf(str(path))
        written_by = idata.posterior.attrs.get(METHOD_ATTRIBUTE)
        if written_by != method:
            raise ValueError(f"written by method {written_by!r}, but the run is of method {method!r}")
        for name, draws in idata.posterior.data_vars.items():
            if name in scores and tuple(draws.shape[2:]) != scores[name].shape:
                raise ValueError(
                    f"{name!r} has shape {list(draws.shape[2:])}, but scores.npz has {list(scores[name].shape)}"
                )
    return idata


def _diagnostics(run_dir: Path, idata, top: int = 10) -> list:
    """Report sections from ``posterior.nc`` (``idata``): ``az.summary`` of ψ and the ArviZ plots."""
    written = plot_diagnostics(idata, run_dir)
    chains = idata.posterior.sizes["chain"]
    sections = [
        f"## Posterior diagnostics (ArviZ, {chains} chain{'s' if chains > 1 else ''})\n\n"
        "Chains are independent fits from different seeds (`chains = N` in the config); `posterior.nc` "
        "holds draws from each q and loads with `arviz.from_netcdf`."
    ]
    if "psi" in idata.posterior.data_vars:
        sections += pooled_importance_sections(run_dir, idata, top)
    captions = {
        "forest_psi": "forest plot of the feature importance ψ of each restart",
        "ppc": "posterior predictive check on the test set",
        "inclusion_cdf": "CDF of inclusion probabilities per chain",
    }
    sections += [f"![{captions[name]}]({path.name})" for name, path in written.items()]
    return sections
