"""``bayesprune importance`` as a library call: the feature importance ψ, φ (paper 003, eqs. 3.18-3.19)
and node importance of a saved run, per input and per group of correlated inputs, its selection of groups,
the plain network's own importance beside it and the plain network refit on the selection, written beside
the run as ``importance.csv``, ``group_importance.csv``, ``node_importance.csv``, ``importance.png`` and
``selection.json``.

Groups (:mod:`bayesprune.analysis.groups`): inputs whose absolute correlation on the training rows exceeds
``importance.correlation`` (0.9), or the user's ``importance.groups``. Selection (``importance.selection``,
``--selection``), of groups: by default the empirical null of the pooled log ψ
(:func:`~bayesprune.analysis.selection.select_by_empirical_null`, chosen by measurement,
benchmarks/importance_default.py); or the Bayesian FDR rule on posterior inclusion; or model-X knockoffs
(:mod:`bayesprune.analysis.knockoffs`). A run without pooled restarts (a method without a posterior of
inclusion) selects what its fit keeps unless a rule is asked for."""

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from bayesprune.analysis.diagnostics import restarts_not_learned, restarts_refitted
from bayesprune.analysis.groups import correlation_groups, group_values, named_groups, pooled_group_importance
from bayesprune.analysis.importance import (
    SELECTION,
    STABILITY_RULE,
    STABLE_SPEARMAN,
    agreed_tiers,
    empirical_null_selection,
    half_spearman,
    input_importance,
    keep_matrices,
    node_importance_table,
    node_layer_names,
    plot_importance,
    plot_importance_image,
    pooled_importance_of,
    pooled_node_importance_of,
    stability_selection,
    tiers_text,
)
from bayesprune.analysis.knockoffs import KNOCKOFF_COPIES, GaussianKnockoffs, select_by_multiple_knockoffs
from bayesprune.analysis.selection import (
    STABILITY_THRESHOLD,
    expected_false_discovery_rate,
    mask_features,
    select_by_bayesian_fdr,
)
from bayesprune.analysis.tables import write_csv
from bayesprune.core.chain import layer_chain
from bayesprune.core.errors import BayesPruneError, ConfigError
from bayesprune.core.files import write_text
from bayesprune.core.tasks import metric_name
from bayesprune.methods import FitContext, get_method
from bayesprune.models import new_net
from bayesprune.pipeline.baseline import train_plain
from bayesprune.pipeline.checks import check_importance, run_chains
from bayesprune.pipeline.report import read_metrics, read_posterior, read_scores
from bayesprune.pipeline.rundir import load_run
from bayesprune.pipeline.sections import IMPORTANCE_SELECTIONS

#: The files :func:`importance` writes into the run directory, in the order it names them.
FILES = ("importance.csv", "group_importance.csv", "node_importance.csv", "importance.png", SELECTION)
#: The selection rules of :func:`importance`: the empirical null of log ψ (the default), the Bayesian FDR on
#: posterior inclusion, model-X knockoffs.
SELECTIONS = IMPORTANCE_SELECTIONS


@dataclass
class Importance:
    """What :func:`importance` computed and wrote.

    Attributes:
        rows: one per input (``importance.csv``): its ψ (and φ), rank, group and whether its group is selected.
        groups: one per group of inputs (``group_importance.csv``), ranked and selected.
        nodes: one per hidden unit (``node_importance.csv``).
        selection: the ``selection.json`` record: the selected groups and inputs, the rule, the restarts and
            their agreement, and for tables the plain network's ``refit`` on the selection.
        files: the paths written.
    """

    rows: list
    groups: list
    nodes: list
    selection: dict
    files: list

    def summary(self) -> list:
        """The lines ``bayesprune importance`` prints."""
        record = self.selection
        grouped = [row["group"] for row in self.groups if row["size"] > 1]
        inputs = len(record["selected"]) + len(record["not_selected"])
        lines = [
            f"selected {len(record['selected'])} of {inputs} inputs, {len(record['selected_groups'])} of "
            f"{len(self.groups)} groups ({record['rule']}): {', '.join(record['selected_groups']) or 'none'}",
            f"groups of correlated inputs ({record['grouping']}): {'; '.join(grouped) or 'none'}",
        ]
        if record["rule"] == "bayesian-fdr" and len(self.groups) > 1 and not record["not_selected"]:
            lines.append(
                "every input has a path of included weights with probability near 1, so this rule separates none; "
                "--selection empirical-null selects those whose psi stands out from the rest"
            )
        lines += stability_lines(record)
        if record.get("restarts", 1) > 1 and "restart_rank_worst" in self.groups[0]:
            lines.append(
                f"the {record['restarts']} restarts agree on these tiers of groups (each orders a tier its own way): "
                f"{tiers_text(agreed_tiers([{**row, 'feature': row['group']} for row in self.groups]))}"
            )
        if "peers" in record:
            lines.append(record["peers"]["summary"])
        if "refit" in record:
            refit = record["refit"]
            lines.append(
                f"plain network refit on the selected inputs: {refit['metric']} {refit['selected_inputs']:.4g} "
                f"(all inputs: {refit['all_inputs']:.4g})"
            )
        return [*lines, f"wrote {', '.join(str(path) for path in self.files)}"]


def stability_lines(record: dict) -> list:
    """How many restarts were pooled and how well their ranking of the groups reproduces, with a warning
    below :data:`~bayesprune.analysis.importance.STABLE_SPEARMAN`."""
    restarts, rho = record.get("restarts", 1), record.get("half_spearman", float("nan"))
    if restarts < 2:
        return ["one fit: no second half of restarts to check the ranking against (set chains = 8 or more)"]
    line = f"{restarts} restarts pooled; Spearman of the group ranking between the two halves of the restarts {rho:.3f}"
    if not rho >= STABLE_SPEARMAN:
        line += (
            f"\nwarning: below {STABLE_SPEARMAN}, so another run from other seeds would rank the groups "
            "differently: fit more restarts (chains) before reporting this ranking"
        )
    refitted = record.get("restarts_refitted", [])
    if refitted:
        line += (
            f"\n{len(refitted)} of {restarts} restarts did not learn from the network's start and were fitted again "
            f"from the fan-in start (chains {', '.join(map(str, refitted))})"
        )
    flagged = record.get("restarts_not_learned", [])
    if flagged:
        line += (
            f"\nwarning: {len(flagged)} of {restarts} restarts did not learn (chains {', '.join(map(str, flagged))}: "
            "their error on the training rows is no better than that of a predictor that reads no input), "
            "so their psi is noise pooled with the others'"
        )
    return [line]


def importance(
    run_dir,
    *,
    top: int = 30,
    fdr: float = 0.1,
    selection: str | None = None,
    copies: int = KNOCKOFF_COPIES,
    force: bool = False,
) -> Importance:
    """The importance of the inputs of the saved run in ``run_dir`` (``bayesprune importance RUN_DIR``).

    With a ``posterior.nc`` holding ψ's draws, every restart pooled (the numbers the report gives), per input
    and per group (:func:`input_groups`), and the groups selected by ``selection`` (the run's
    ``importance.selection`` unless given): ``"empirical-null"``, Benjamini-Hochberg at ``fdr`` on the
    groups' pooled log ψ against its empirical null (:func:`empirical_null_record`); ``"bayesian-fdr"``, the
    largest set of groups whose posterior expected false-discovery rate is at most ``fdr``; ``"knockoff"``
    (1-D inputs only), model-X knockoffs at level ``fdr`` (:func:`knockoff_importance`: the run's method
    fitted again, as many restarts as the run, on the inputs beside ``copies`` knockoff copies of every
    group). Without pooled restarts, the fit's own keep matrices, and unless a rule is asked for the groups
    a path of kept weights joins to the output. For 1-D inputs (tables), the run's plain network is trained
    on all inputs, its permutation importance and integrated gradients (:mod:`bayesprune.analysis.peers`)
    put beside ψ, and refit on the selected inputs alone.

    Args:
        run_dir: a run directory of a single fit.
        top: features shown in the bar plot ``importance.png`` (image inputs get a heat map of every pixel).
        fdr: bound on the false-discovery rate of the selection, in [0, 1) (in (0, 1) but for ``bayesian-fdr``).
        selection: one of :data:`SELECTIONS`, or ``None`` for the run's ``importance.selection``.
        copies: knockoff copies of every input (``knockoff`` only).
        force: overwrite the importance files of an earlier call.

    Raises :class:`~bayesprune.core.errors.BayesPruneError` (one line, nothing written) on a bad argument
    or run directory.
    """
    _check_arguments(top, fdr, selection, copies)
    run_dir = Path(run_dir)
    outputs = [run_dir / name for name in FILES]
    if any(path.exists() for path in outputs) and not force:
        raise BayesPruneError(f"{run_dir}: importance.csv exists; pass --force to overwrite it")
    folder = next((path for path in outputs if path.is_dir() and not path.is_symlink()), None)
    if folder is not None:
        raise BayesPruneError(f"{run_dir}: {folder.name} is a folder, where importance writes a file; move it away")
    config, dataset, fitted = load_run(run_dir)
    try:
        check_importance(config, dataset, selection=selection, copies=copies, key="--selection")
    except ConfigError as error:
        raise BayesPruneError(f"{run_dir}: {error}") from None
    if selection == "knockoff" and len(dataset.input_shape) != 1:
        raise BayesPruneError(f"{run_dir}: knockoff selection needs 1-D inputs (a table), got {dataset.input_shape}")
    idata = _posterior_with_importance(run_dir)
    names = _input_names(dataset, idata)
    groups = input_groups(config, dataset, names)
    if idata is None and selection == "bayesian-fdr":
        raise BayesPruneError(
            f"{run_dir}: bayesian-fdr selection needs posterior.nc's pooled psi (a run of a method with inclusion probabilities)"
        )
    rows, group_rows, nodes, record = _importance_of(run_dir, config, idata, fitted, groups, names)
    rule = selection or (config.importance.selection if idata is not None else None)
    if rule is not None:
        record = _select(rule, group_rows, fdr, record, config=config, dataset=dataset, groups=groups, copies=copies)
    _mark_selection(rows, group_rows, groups, record)
    if len(dataset.input_shape) == 1:
        record["peers"] = _peers_beside(config, dataset, groups, rows, group_rows)
        record["refit"] = _refit_on_selection(config, dataset, [row["selected"] for row in rows], record["peers"])
        record["peers"].pop("all_inputs")
    _write(outputs, rows, group_rows, nodes, record, dataset, top)
    return Importance(rows, group_rows, nodes, record, outputs)


def _check_arguments(top, fdr, selection, copies):
    """Refuse a bad argument of :func:`importance` in one line naming it."""
    if top < 1:
        raise BayesPruneError(f"--top must be a positive integer, got {top}")
    if not 0 <= fdr < 1:
        raise BayesPruneError(f"--fdr must lie in [0, 1), got {fdr}")
    if selection is not None and selection not in SELECTIONS:
        raise BayesPruneError(f"--selection must be one of {', '.join(SELECTIONS)}, got {selection!r}")
    if selection != "bayesian-fdr" and fdr == 0:
        raise BayesPruneError(f"--fdr must lie in (0, 1) for {selection or 'the default'} selection, got 0")
    if not (isinstance(copies, int) and copies >= 1):
        raise BayesPruneError(f"--copies must be a positive integer, got {copies!r}")


def _input_names(dataset, idata) -> list:
    """One name per input: ``posterior.nc``'s (the pooled rows'), else the table's, else ``x0, x1, ...``."""
    if idata is not None:
        return [str(name) for name in idata.posterior["psi"]["feature"].values]
    if dataset.feature_names is not None:
        return list(dataset.feature_names)
    return [f"x{j}" for j in range(math.prod(dataset.input_shape))]


def input_groups(config, dataset, names: list) -> list:
    """The run's groups of inputs, lists of input indices: the user's ``importance.groups`` (by ``names``), else
    the inputs whose absolute correlation on the training rows exceeds ``importance.correlation``; every input
    alone for images."""
    if len(dataset.input_shape) != 1:
        return [[j] for j in range(len(names))]
    if config.importance.groups is not None:
        return named_groups(config.importance.groups, names)
    return correlation_groups(dataset.x_train.double().numpy(), config.importance.correlation)


def _grouping(config) -> str:
    """How the groups were formed, in words."""
    if config.importance.groups is not None:
        return "importance.groups"
    return f"absolute correlation above {config.importance.correlation:g} on the training rows"


def _importance_of(run_dir, config, idata, fitted, groups, names) -> tuple:
    """Rows per input and per group, node rows and the selection record of the fit itself (pooled
    restarts: the Bayesian FDR rule's; a single fit: the groups it keeps)."""
    if idata is not None:
        rows = pooled_importance_of(idata)
        draws = idata.posterior["psi"].transpose("chain", "draw", "feature").values
        at_p = idata["variational"]["psi"].transpose("chain", "feature").values
        group_rows = pooled_group_importance(draws, at_p, groups, names)
        for row, values in zip(group_rows, group_values(at_p, groups).T):
            row["restart_psi"] = values.tolist()
        outputs = layer_chain(fitted.net)[-1].module.weight.shape[0]
        nodes = pooled_node_importance_of(idata, node_layer_names(fitted.net), outputs)
        record = {
            "restarts": len(at_p),
            "half_spearman": half_spearman(group_values(at_p, groups)),
            "input_half_spearman": half_spearman(at_p),
            **({"restarts_not_learned": flagged} if (flagged := restarts_not_learned(idata)) else {}),
            **({"restarts_refitted": refitted} if (refitted := restarts_refitted(idata)) else {}),
        }
        _choose(group_rows, [row["selected"] for row in group_rows], record, "bayesian-fdr", _BAYESIAN_FDR)
    else:
        try:
            soft, hard, kept_by = keep_matrices(fitted)
            rows = input_importance(fitted, names)
            nodes = node_importance_table(fitted.net, hard if soft is None else soft)
        except ValueError as error:
            raise BayesPruneError(f"{run_dir}: {error}") from None
        group_rows = _single_fit_groups(rows, groups, names)
        record = {"restarts": 1, "half_spearman": float("nan"), "input_half_spearman": float("nan")}
        description = (
            f"a group is selected when a path of weights the fit keeps ({kept_by}) joins one of its inputs to "
            "the output; no false-discovery rate is controlled"
        )
        _choose(group_rows, [row["selected"] for row in group_rows], record, "kept-by-the-fit", description)
    record.update(grouping=_grouping(config), pooled=idata is not None)
    return rows, group_rows, nodes, record


_BAYESIAN_FDR = (
    "the largest set of groups of highest posterior inclusion probability (the pooled probability that a path of "
    "included weights joins one of the group's inputs to the output) whose posterior expected false-discovery "
    "rate, the mean of 1 - inclusion probability over the set, is at most fdr; an irrelevant input keeps some "
    "path with probability well above 0 (0.6-0.96 on simulated data), so the realised rate often exceeds fdr"
)


def _single_fit_groups(rows: list, groups: list, names: list) -> list:
    """Group rows of a single fit: ψ and φ the mean over the group's inputs, selected when any input is, ranked."""
    psi = group_values([row["psi"] for row in rows], groups)
    order = np.argsort(-psi, kind="stable")
    rank = np.empty(len(psi), dtype=int)
    rank[order] = np.arange(1, len(psi) + 1)
    span = np.ptp(psi)
    return [
        {
            "group": " + ".join(names[j] for j in group),
            "psi": float(psi[g]),
            "phi": float((psi[g] - psi.min()) / span) if span > 0 else 1.0,
            "selected": any(rows[j]["selected"] for j in group),
            "rank": int(rank[g]),
            "inputs": [names[j] for j in group],
            "size": len(group),
            "restart_psi": [float(psi[g])],
        }
        for g, group in enumerate(groups)
    ]


def _choose(group_rows: list, chosen, record: dict, rule: str, description: str, **extra):
    """Set every group row's ``selected`` and the record's rule, description and lists."""
    for row, keep in zip(group_rows, chosen):
        row["selected"] = bool(keep)
    record.update(rule=rule, description=description, **extra)
    record["selected_groups"] = [row["group"] for row in group_rows if row["selected"]]
    record["selected"] = [name for row in group_rows if row["selected"] for name in row["inputs"]]
    record["not_selected"] = [name for row in group_rows if not row["selected"] for name in row["inputs"]]
    record["groups"] = {row["group"]: row["inputs"] for row in group_rows}


def _select(rule, group_rows, fdr, record, *, config, dataset, groups, copies) -> dict:
    """The record of ``rule`` at level ``fdr`` on the groups (rows of :func:`_importance_of`)."""
    kept = ("restarts", "half_spearman", "input_half_spearman", "grouping", "pooled")
    restarts = {key: record[key] for key in ("restarts_not_learned", "restarts_refitted") if key in record}
    record = {**{key: record[key] for key in kept}, **restarts, "fdr": fdr}
    if rule == "stability":
        chosen, frequency = stability_selection(np.array([row["restart_psi"] for row in group_rows]).T, fdr)
        for row, share in zip(group_rows, frequency):
            row["selection_frequency"] = float(share)
        _choose(group_rows, chosen, record, rule, STABILITY_RULE, threshold=STABILITY_THRESHOLD)
    elif rule == "empirical-null":
        chosen, description = empirical_null_selection(group_rows, fdr)
        _choose(group_rows, chosen, record, rule, description, psi={row["group"]: row["psi"] for row in group_rows})
    elif rule == "bayesian-fdr":
        inclusion = torch.tensor([row["inclusion_probability"] for row in group_rows], dtype=torch.float64)
        chosen = select_by_bayesian_fdr(inclusion, fdr)
        _choose(
            group_rows,
            chosen.tolist(),
            record,
            rule,
            _BAYESIAN_FDR,
            expected_false_discovery_rate=expected_false_discovery_rate(inclusion, chosen),
            inclusion_probability={row["group"]: row["inclusion_probability"] for row in group_rows},
        )
    else:
        psi = knockoff_importance(config, dataset, groups, copies=copies)
        knockoff_record(group_rows, psi, fdr=fdr, record=record)
    return record


def _mark_selection(rows: list, group_rows: list, groups: list, record: dict):
    """Every input row's ``group`` and ``selected`` (its group's), and both tables' restart columns."""
    for row, group in zip(group_rows, groups):
        for j in group:
            rows[j].update(group=row["group"], selected=row["selected"])
    for table, key in ((rows, "input_half_spearman"), (group_rows, "half_spearman")):
        for row in table:
            row.update(restarts=record.get("restarts", 1), half_spearman=record.get(key, float("nan")))


def _write(outputs, rows, group_rows, nodes, record, dataset, top):
    """The five files of :data:`FILES`."""
    write_csv(outputs[0], rows)
    hidden = ("inputs", "restart_psi")  # in selection.json's groups; ψ of each restart is in posterior.nc
    write_csv(outputs[1], [{key: value for key, value in row.items() if key not in hidden} for row in group_rows])
    write_csv(outputs[2], nodes)
    if len(dataset.input_shape) == 3 and len(rows) == math.prod(dataset.input_shape):
        plot_importance_image(rows, dataset.input_shape, outputs[3], title="Feature importance ψ")
    else:
        ordered = sorted(group_rows, key=lambda row: row["rank"])
        plot_importance(
            [{**row, "feature": row["group"]} for row in ordered[:top]],
            outputs[3],
            title=f"Importance ψ of groups of inputs (top {min(top, len(group_rows))} of {len(group_rows)})",
        )
    write_text(outputs[4], json.dumps(record, indent=1) + "\n")


def _plain_network(config, dataset):
    """The run's plain network trained as the run trains it (its baseline settings) and its test metric."""
    config = config.for_data(dataset.num_train)
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed)
    metric = train_plain(
        net.to(config.torch_device),
        dataset,
        epochs=config.baseline.epochs or config.train.epochs,
        lr=config.baseline.lr or config.optim.lr,
        batch_size=config.data.batch_size,
        seed=config.seed,
        hold=config.baseline.held_out,
    )["test"]
    return net.cpu(), metric


def _peers_beside(config, dataset, groups: list, rows: list, group_rows: list) -> dict:
    """The plain network's permutation importance and integrated gradients on the test rows
    (:mod:`bayesprune.analysis.peers`, Captum) added to every input and group row, and how their rankings
    agree with ψ's (Spearman over the groups). Without Captum the columns are left out and the record says so."""
    from scipy.stats import spearmanr

    net, metric = _plain_network(config, dataset)
    peers = {"all_inputs": metric}
    try:
        from bayesprune.analysis.peers import integrated_gradients, permutation_importance
    except ImportError:  # pragma: no cover - captum is an extra
        return {
            **peers,
            "summary": "the plain network's permutation importance and integrated gradients need "
            "Captum: pip install 'bayesprune[importance]'",
        }
    x, y, task = dataset.x_test.float(), dataset.y_test, dataset.task
    singles = [[j] for j in range(len(rows))]
    for table, parts in ((rows, singles), (group_rows, groups)):
        permutation = permutation_importance(net, x, y, task, parts, seed=config.seed)
        gradients = integrated_gradients(net, x, task, parts)
        for row, value, attribution in zip(table, permutation, gradients):
            row.update(plain_permutation=float(value), plain_integrated_gradients=float(attribution))
    psi = [row["psi"] for row in group_rows]
    agreement = {}
    for name, key in (("permutation", "plain_permutation"), ("integrated_gradients", "plain_integrated_gradients")):
        values = [row[key] for row in group_rows]
        agreement[name] = float(spearmanr(psi, values)[0]) if np.ptp(psi) > 0 and np.ptp(values) > 0 else float("nan")
    summary = (
        "the plain network's ranking of the groups against psi's (Spearman): permutation importance "
        f"{agreement['permutation']:.2f}, integrated gradients {agreement['integrated_gradients']:.2f} "
        "(Captum, on the test rows; columns plain_permutation, plain_integrated_gradients)"
    )
    return {**peers, "spearman_with_psi": agreement, "summary": summary}


def _refit_on_selection(config, dataset, selected: list, peers: dict) -> dict:
    """Test metric of the run's plain network on all inputs (:func:`_plain_network`, trained once for the
    peers) and trained, as the run trains it, on the selected inputs only (the others set to zero:
    X·diag(Ẑ), paper 003's Algorithm 2)."""
    mask = torch.tensor(selected, dtype=torch.bool)
    masked = replace(dataset, x_train=mask_features(dataset.x_train, mask), x_test=mask_features(dataset.x_test, mask))
    return {
        "metric": metric_name(dataset.task),
        "all_inputs": peers["all_inputs"],
        "selected_inputs": _plain_network(config, masked)[1],
    }


def _posterior_with_importance(run_dir: Path):
    """The run's ``posterior.nc`` (checked as the report checks it) when it holds ψ's draws, else ``None``."""
    if not (run_dir / "posterior.nc").is_file():
        return None
    idata = read_posterior(run_dir, read_metrics(run_dir)["method"], read_scores(run_dir))
    return idata if "psi" in idata.posterior.data_vars else None


def knockoff_importance(
    config, dataset, groups=None, *, copies: int = KNOCKOFF_COPIES, seed: int | None = None
) -> np.ndarray:
    """ψ (paper 003's eq. 3.18) of every group of inputs and of each of its ``copies`` model-X knockoffs
    (Candès et al. 2018; Roquero Gimenez and Zou 2019 for several copies).

    Gaussian knockoffs with knockpy's MVR S-matrix, block-diagonal by group
    (:class:`~bayesprune.analysis.knockoffs.GaussianKnockoffs`, fitted on the training rows), are drawn for
    the training and test rows, and the config's method is fitted on [X, X̃¹, …] as the run fits it: one
    restart per chain of the run (seeds ``config.seed``, ``+1``, ...), ψ of every column averaged over them
    (:func:`~bayesprune.analysis.importance.input_importance`), then over each group's columns. Swapping a
    group with one of its copies swaps their ψ: the exchangeability the guarantee needs.

    Args:
        config, dataset: the run's config and its table (1-D inputs).
        groups: lists of input indices; every input alone by default.
        copies: knockoff copies of every input.
        seed: generator of the knockoff draws; the config's seed by default.

    Returns:
        ``(copies + 1, groups)``: row 0 the groups' ψ, row k that of their k-th copies
        (:func:`~bayesprune.analysis.knockoffs.select_by_multiple_knockoffs` reads it).
    """
    seed = config.seed if seed is None else seed
    x_train = dataset.x_train.double().numpy()
    features = x_train.shape[1]
    groups = [[j] for j in range(features)] if groups is None else groups
    knockoffs = GaussianKnockoffs.fit(x_train, groups, copies=copies)

    def beside_knockoffs(x, draw_seed):
        drawn = torch.as_tensor(knockoffs.sample(x.double().numpy(), seed=draw_seed), dtype=x.dtype)
        return torch.cat([x, drawn], dim=1)

    augmented = replace(
        dataset,
        x_train=beside_knockoffs(dataset.x_train, seed),
        x_test=beside_knockoffs(dataset.x_test, seed + 1),
        input_shape=((copies + 1) * features,),
        feature_names=None,
        input_mean=None,
        input_std=None,
    )
    method, device = get_method(config.method), config.torch_device
    psi = []
    for chain in range(run_chains(config, dataset)):
        net = new_net(config, augmented.input_shape, augmented.output_dim, seed=config.seed + chain)
        ctx = FitContext.from_config(config, augmented, device=device, seed=config.seed + chain)
        fitted = method.fit(net, augmented, config.method_options, ctx)
        psi.append([row["psi"] for row in input_importance(fitted)])
    return group_values(np.mean(psi, axis=0).reshape(copies + 1, features), groups)


def knockoff_record(group_rows: list, psi, *, fdr: float, record: dict) -> dict:
    """The multiple-knockoff+ filter at level ``fdr`` on the ψ of :func:`knockoff_importance` (knockoff+ with
    one copy), written into ``record`` and the group rows (``knockoff_psi``: the highest copy's ψ)."""
    psi = np.asarray(psi, dtype=float)
    description = (
        f"model-X knockoffs ({len(psi) - 1} Gaussian copies of every group of inputs, knockpy's MVR S-matrix on "
        "the Ledoit-Wolf covariance of the training rows): the method refit on the inputs beside their copies, a "
        "group selected when its psi leads its copies' by at least the knockoff+ threshold (Roquero Gimenez and "
        "Zou's filter for several copies); the expected false-discovery proportion is at most fdr when the inputs "
        "are Gaussian (approximately otherwise), and nothing is selected unless at least 1/(copies x fdr) groups can be"
    )
    _choose(
        group_rows,
        select_by_multiple_knockoffs(psi, fdr),
        record,
        "knockoff+",
        description,
        copies=len(psi) - 1,
        psi_input_and_copies={row["group"]: psi[:, g].tolist() for g, row in enumerate(group_rows)},
    )
    for row, copy_psi in zip(group_rows, psi[1:].max(axis=0)):
        row["knockoff_psi"] = float(copy_psi)
    return record


def empirical_null_record(rows: list, *, fdr: float, restarts: int) -> dict:
    """A ``selection.json``-like record of :func:`empirical_null_selection` on input rows (benchmarks)."""
    chosen, description = empirical_null_selection(rows, fdr)
    return {
        "rule": "empirical-null",
        "fdr": fdr,
        "description": description,
        "restarts": restarts,
        "selected": [row["feature"] for row, keep in zip(rows, chosen) if keep],
        "not_selected": [row["feature"] for row, keep in zip(rows, chosen) if not keep],
        "psi": {row["feature"]: row["psi"] for row in rows},
    }
