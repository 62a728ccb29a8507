"""``bayesprune importance`` as a library call: the feature importance ψ, φ (paper 003, eqs. 3.18-3.19)
and node importance of a saved run, its selection of inputs, and the plain network refit on them,
written beside the run as ``importance.csv``, ``node_importance.csv``, ``importance.png`` and
``selection.json``. The selection is the Bayesian FDR rule on posterior inclusion, or on request the
inclusion probabilities' empirical null (:func:`~bayesprune.analysis.selection.select_by_empirical_null`)
or model-X knockoffs (a frequentist FDR guarantee, :mod:`bayesprune.analysis.knockoffs`)."""

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from bayesprune.analysis.importance import (
    SELECTION,
    agreed_tiers,
    input_importance,
    keep_matrices,
    kept_inputs_record,
    node_importance_table,
    node_layer_names,
    plot_importance,
    plot_importance_image,
    pooled_importance_of,
    pooled_node_importance_of,
    selection_record,
    tiers_text,
)
from bayesprune.analysis.knockoffs import GaussianKnockoffs, select_by_multiple_knockoffs
from bayesprune.analysis.selection import mask_features, select_by_empirical_null
from bayesprune.analysis.tables import write_csv
from bayesprune.core.errors import BayesPruneError
from bayesprune.core.files import write_text
from bayesprune.core.loop import resolve_device
from bayesprune.core.structure import layer_chain
from bayesprune.core.tasks import metric_name
from bayesprune.methods import FitContext, get_method
from bayesprune.models import new_net
from bayesprune.pipeline.baseline import train_plain
from bayesprune.pipeline.checks import run_chains
from bayesprune.pipeline.report import read_metrics, read_posterior, read_scores
from bayesprune.pipeline.rundir import load_run

#: The files :func:`importance` writes into the run directory, in the order it names them.
FILES = ("importance.csv", "node_importance.csv", "importance.png", SELECTION)
#: The selection rules of :func:`importance`: the Bayesian FDR on posterior inclusion, the empirical null of
#: its logits, model-X knockoffs.
SELECTIONS = ("bayesian-fdr", "empirical-null", "knockoff")
#: Knockoff copies of every input: knockoff+ with one copy selects nothing unless it can select 1/fdr
#: inputs at once (none of 5 relevant inputs at fdr 0.1); κ copies lower that floor to 1/(κ·fdr).
KNOCKOFF_COPIES = 2


@dataclass
class Importance:
    """What :func:`importance` computed and wrote.

    Attributes:
        rows: one per input (``importance.csv``): its ψ (and φ), rank and whether it is selected.
        nodes: one per hidden unit (``node_importance.csv``).
        selection: the ``selection.json`` record: the selected inputs, the rule, and for tables the
            plain network's ``refit`` on them.
        files: the paths written.
    """

    rows: list
    nodes: list
    selection: dict
    files: list

    def summary(self) -> list:
        """The lines ``bayesprune importance`` prints."""
        selection = self.selection
        lines = [
            f"selected {len(selection['selected'])} of {len(self.rows)} inputs ({selection['rule']}): "
            f"{', '.join(selection['selected']) or 'none'}"
        ]
        if selection["rule"] == "bayesian-fdr" and len(self.rows) > 1 and not selection["not_selected"]:
            lines.append(
                "every input has a path of included weights with probability near 1, so this rule separates none; "
                "--selection empirical-null selects those whose psi stands out from the rest"
            )
        if selection.get("restarts", 1) > 1 and "restart_rank_worst" in self.rows[0]:
            tiers = tiers_text(agreed_tiers(self.rows))
            lines.append(
                f"the {selection['restarts']} restarts agree on these tiers (each orders a tier its own way): {tiers}"
            )
        if "refit" in selection:
            refit = selection["refit"]
            lines.append(
                f"plain network refit on the selected inputs: {refit['metric']} {refit['selected_inputs']:.4g} "
                f"(all inputs: {refit['all_inputs']:.4g})"
            )
        return [*lines, f"wrote {', '.join(str(path) for path in self.files)}"]


def importance(
    run_dir,
    *,
    top: int = 30,
    fdr: float = 0.1,
    selection: str = "bayesian-fdr",
    copies: int = KNOCKOFF_COPIES,
    force: bool = False,
) -> Importance:
    """The importance of the inputs of the saved run in ``run_dir`` (``bayesprune importance RUN_DIR``).

    With a ``posterior.nc`` holding ψ's draws, every restart pooled (the numbers the report gives) and
    the inputs selected by the Bayesian FDR bound ``fdr``; otherwise the fit's own keep matrices, and
    the inputs a path of kept weights joins to the output. ``selection="empirical-null"`` selects by the
    Benjamini-Hochberg rule at ``fdr`` on the pooled log ψ against its empirical null
    (:func:`empirical_null_record`); ``selection="knockoff"`` (1-D inputs only) selects instead by
    model-X knockoffs at level ``fdr`` (:func:`knockoff_importance`: the run's method
    fitted again, as many restarts as the run, on the inputs beside ``copies`` knockoff copies). For 1-D
    inputs (tables), the run's plain network is refit on the selected inputs alone and on all of them.

    Args:
        run_dir: a run directory of a single fit.
        top: features shown in the bar plot ``importance.png`` (image inputs get a heat map of every pixel).
        fdr: bound on the false-discovery rate of the selection, in [0, 1): the posterior expected rate
            (``bayesian-fdr``) or the frequentist one (``empirical-null`` and ``knockoff``, in (0, 1)).
        selection: ``"bayesian-fdr"``, ``"empirical-null"`` or ``"knockoff"``.
        copies: knockoff copies of every input (``knockoff`` only).
        force: overwrite the importance files of an earlier call.

    Raises :class:`~bayesprune.core.errors.BayesPruneError` (one line, nothing written) on a bad argument
    or run directory.
    """
    if top < 1:
        raise BayesPruneError(f"--top must be a positive integer, got {top}")
    if not 0 <= fdr < 1:
        raise BayesPruneError(f"--fdr must lie in [0, 1), got {fdr}")
    if selection not in SELECTIONS:
        raise BayesPruneError(f"--selection must be one of {', '.join(SELECTIONS)}, got {selection!r}")
    if selection != "bayesian-fdr" and fdr == 0:
        raise BayesPruneError(f"--fdr must lie in (0, 1) for {selection} selection, got 0")
    if not (isinstance(copies, int) and copies >= 1):
        raise BayesPruneError(f"--copies must be a positive integer, got {copies!r}")
    run_dir = Path(run_dir)
    outputs = [run_dir / name for name in FILES]
    if any(path.exists() for path in outputs) and not force:
        raise BayesPruneError(f"{run_dir}: importance.csv exists; pass --force to overwrite it")
    folder = next((path for path in outputs if path.is_dir() and not path.is_symlink()), None)
    if folder is not None:
        raise BayesPruneError(f"{folder}: is a folder, where importance writes a file; move it away")
    config, dataset, fitted = load_run(run_dir)
    if selection == "knockoff" and len(dataset.input_shape) != 1:
        raise BayesPruneError(f"{run_dir}: knockoff selection needs 1-D inputs (a table), got {dataset.input_shape}")
    idata = _posterior_with_importance(run_dir)
    if selection == "empirical-null" and idata is None:
        raise BayesPruneError(
            f"{run_dir}: empirical-null selection needs posterior.nc's pooled psi (a run of a method with inclusion probabilities)"
        )
    if idata is not None:
        rows, nodes, record = _pooled_importance(idata, fitted, fdr)
    else:
        try:
            soft, hard, kept_by = keep_matrices(fitted)
            rows = input_importance(fitted, dataset.feature_names)
            nodes = node_importance_table(fitted.net, hard if soft is None else soft)
        except ValueError as error:
            raise BayesPruneError(f"{run_dir}: {error}") from None
        record = kept_inputs_record(rows, kept_by)
    if selection == "empirical-null":
        record = empirical_null_record(rows, fdr=fdr, restarts=idata.posterior.sizes["chain"])
        for row in rows:
            row["selected"] = row["feature"] in record["selected"]
    if selection == "knockoff":
        psi = knockoff_importance(config, dataset, copies=copies)
        record = knockoff_record(rows, psi, fdr=fdr, restarts=run_chains(config, dataset))
        for row, knockoff_psi in zip(rows, psi[1:].max(axis=0)):
            row.update(knockoff_psi=float(knockoff_psi), selected=row["feature"] in record["selected"])
    write_csv(outputs[0], rows)
    write_csv(outputs[1], nodes)
    if len(dataset.input_shape) == 3 and len(rows) == math.prod(dataset.input_shape):
        plot_importance_image(rows, dataset.input_shape, outputs[2], title="Feature importance ψ")
    else:
        ordered = sorted(rows, key=lambda row: row["rank"])
        plot_importance(
            ordered[:top], outputs[2], title=f"Feature importance ψ (top {min(top, len(rows))} of {len(rows)})"
        )
    if len(dataset.input_shape) == 1:
        record["refit"] = _refit_on_selection(config, dataset, [row["selected"] for row in rows])
    write_text(outputs[3], json.dumps(record, indent=1) + "\n")
    return Importance(rows, nodes, record, outputs)


def _refit_on_selection(config, dataset, selected: list) -> dict:
    """Test metric of the run's plain network trained, as the run trains it, on all inputs and on the
    selected ones only (the others set to zero: X·diag(Ẑ), paper 003's Algorithm 2)."""
    config = config.for_data(dataset.num_train)
    mask = torch.tensor(selected, dtype=torch.bool)
    masked = replace(dataset, x_train=mask_features(dataset.x_train, mask), x_test=mask_features(dataset.x_test, mask))
    result = {"metric": metric_name(dataset.task)}
    for key, data in (("all_inputs", dataset), ("selected_inputs", masked)):
        net = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed)
        result[key] = train_plain(
            net.to(resolve_device(config.device)),
            data,
            epochs=config.baseline.epochs or config.train.epochs,
            lr=config.baseline.lr or config.optim.lr,
            batch_size=config.data.batch_size,
            seed=config.seed,
            hold=config.baseline.held_out,
        )["test"]
    return result


def _posterior_with_importance(run_dir: Path):
    """The run's ``posterior.nc`` (checked as the report checks it) when it holds ψ's draws, else ``None``."""
    if not (run_dir / "posterior.nc").is_file():
        return None
    idata = read_posterior(run_dir, read_metrics(run_dir)["method"], read_scores(run_dir))
    return idata if "psi" in idata.posterior.data_vars else None


def _pooled_importance(idata, fitted, fdr: float) -> tuple:
    """Rows of ``importance.csv`` and ``node_importance.csv`` and the ``selection.json`` record, from every
    restart of ``posterior.nc`` pooled: the numbers the report gives."""
    rows = pooled_importance_of(idata, fdr=fdr)
    outputs = layer_chain(fitted.net)[-1].module.weight.shape[0]
    nodes = pooled_node_importance_of(idata, node_layer_names(fitted.net), outputs)
    return rows, nodes, selection_record(rows, fdr=fdr, restarts=idata.posterior.sizes["chain"])


def knockoff_importance(config, dataset, *, copies: int = KNOCKOFF_COPIES, seed: int | None = None) -> np.ndarray:
    """ψ (paper 003's eq. 3.18) of every input and of each of its ``copies`` model-X knockoffs (Candès et
    al. 2018; Roquero Gimenez and Zou 2019 for several copies).

    Second-order equicorrelated Gaussian knockoffs (:class:`~bayesprune.analysis.knockoffs.GaussianKnockoffs`,
    fitted on the training rows) are drawn for the training and test rows, and the config's method
    is fitted on [X, X̃¹, …] as the run fits it: one restart per chain of the run (seeds ``config.seed``,
    ``+1``, ...), ψ of every column averaged over them (:func:`~bayesprune.analysis.importance.input_importance`).
    Swapping X_j with one of its copies swaps their ψ: the exchangeability the guarantee needs.

    Args:
        config, dataset: the run's config and its table (1-D inputs).
        copies: knockoff copies of every input.
        seed: generator of the knockoff draws; the config's seed by default.

    Returns:
        ``(copies + 1, p)``: row 0 the inputs' ψ, row k that of their k-th copies
        (:func:`~bayesprune.analysis.knockoffs.select_by_multiple_knockoffs` reads it).
    """
    seed = config.seed if seed is None else seed
    x_train = dataset.x_train.double().numpy()
    knockoffs = GaussianKnockoffs.fit(x_train, copies=copies)

    def beside_knockoffs(x, draw_seed):
        drawn = torch.as_tensor(knockoffs.sample(x.double().numpy(), seed=draw_seed), dtype=x.dtype)
        return torch.cat([x, drawn], dim=1)

    features = x_train.shape[1]
    augmented = replace(
        dataset,
        x_train=beside_knockoffs(dataset.x_train, seed),
        x_test=beside_knockoffs(dataset.x_test, seed + 1),
        input_shape=((copies + 1) * features,),
        feature_names=None,
        input_mean=None,
        input_std=None,
    )
    method, device = get_method(config.method), resolve_device(config.device)
    psi = []
    for chain in range(run_chains(config, dataset)):
        net = new_net(config, augmented.input_shape, augmented.output_dim, seed=config.seed + chain)
        ctx = FitContext.from_config(config, augmented, device=device, seed=config.seed + chain)
        fitted = method.fit(net, augmented, config.method_options, ctx)
        psi.append([row["psi"] for row in input_importance(fitted)])
    return np.mean(psi, axis=0).reshape(copies + 1, features)


def knockoff_record(rows: list, psi, *, fdr: float, restarts: int) -> dict:
    """The ``selection.json`` record of the multiple-knockoff+ filter at level ``fdr`` on the ψ of
    :func:`knockoff_importance` (knockoff+ with one copy)."""
    psi = np.asarray(psi, dtype=float)
    chosen = select_by_multiple_knockoffs(psi, fdr)
    return {
        "rule": "knockoff+",
        "fdr": fdr,
        "description": f"model-X knockoffs ({len(psi) - 1} second-order equicorrelated Gaussian copies of every "
        "input, Ledoit-Wolf covariance of the training rows): the method refit on the inputs beside their "
        "copies, an input selected when its psi leads its copies' by at least the knockoff+ threshold "
        "(Roquero Gimenez and Zou's filter for several copies); the expected false-discovery proportion is at "
        "most fdr when the inputs are Gaussian (approximately otherwise), and nothing is selected unless at "
        "least 1/(copies x fdr) inputs can be",
        "restarts": restarts,
        "copies": len(psi) - 1,
        "selected": [row["feature"] for row, keep in zip(rows, chosen) if keep],
        "not_selected": [row["feature"] for row, keep in zip(rows, chosen) if not keep],
        "psi_input_and_copies": {row["feature"]: psi[:, j].tolist() for j, row in enumerate(rows)},
    }


def empirical_null_record(rows: list, *, fdr: float, restarts: int) -> dict:
    """The ``selection.json`` record of :func:`~bayesprune.analysis.selection.select_by_empirical_null` at
    level ``fdr`` on log ψ (eq. 3.18) of the pooled restarts (rows of
    :func:`~bayesprune.analysis.importance.pooled_importance`).

    An irrelevant input keeps a path of included weights in well over half the draws (its ~100
    first-layer weights each have a small inclusion probability), so ψ and the inclusion probabilities
    overstate relevance when read as calibrated; compared with the other inputs' instead, the irrelevant
    ones form the null. ψ, the mean path inclusion, keeps apart relevant inputs whose inclusion
    probabilities all reach 1; its log, because ψ is a product of probabilities (a scale, not a location).
    Chosen over the inclusion logit on a simulation (docs/reproductions.md, Selection against known truth).
    """
    psi = torch.tensor([row["psi"] for row in rows], dtype=torch.float64)
    chosen = select_by_empirical_null(torch.log(psi.clamp(min=torch.finfo(torch.float64).tiny)), fdr)
    return {
        "rule": "empirical-null",
        "fdr": fdr,
        "description": "Benjamini-Hochberg at fdr on one-sided p-values of every input's log psi (psi: the pooled "
        "mean probability that a path of included weights joins it to the output) against a normal null centred at "
        "the inputs' median, scaled by their median absolute deviation (Efron's empirical null); the "
        "false-discovery rate is about fdr or less when most inputs are irrelevant",
        "restarts": restarts,
        "selected": [row["feature"] for row, keep in zip(rows, chosen) if keep],
        "not_selected": [row["feature"] for row, keep in zip(rows, chosen) if not keep],
        "psi": {row["feature"]: row["psi"] for row in rows},
    }
