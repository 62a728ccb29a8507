"""A run: config → data → model, guide, objective → fit → pruning curve → a readable run directory.

Everything a user can get wrong (config, data, output directory) is checked before anything is
written. The run is written to a hidden staging directory beside ``out`` and moved into place when
complete, so ``out`` is never left half-written; after a divergence only the last good checkpoint
and the config are moved there.
"""
import copy
import json
import math
import shutil
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyro
import pyro.optim
import torch

from bayesprune.analysis.evaluation import metric_name, pruning_curve
from bayesprune.analysis.importance import node_importance, node_layer_names, scaled_importance, weight_inclusion_matrices
from bayesprune.analysis.inference_data import to_inference_data, write_posterior
from bayesprune.analysis.report import write_report
from bayesprune.guides import SpikeSlabGuide
from bayesprune.models import LIKELIHOODS, BayesianNetwork, build_architecture

from .baseline import train_plain
from .checkpoint import Checkpoint, load_checkpoint
from .config import load_config
from .data import load_dataset, uci_num_splits
from .errors import BayesPruneError, TrainingDiverged
from .fit import PENALTIES, TensorBatches, fit, resolve_device
from .objectives import OBJECTIVES
from .priors import SpikeSlabPrior

CHECKPOINT = "checkpoint.pt"
POSTERIOR = "posterior.nc"
#: Test points in the posterior predictive of ``posterior.nc`` (it stores one draw per point per draw).
PREDICTIVE_TEST_POINTS = 1000


def check_output_dir(out: Path, *, force: bool):
    """Refuse to overwrite a non-empty directory (or a file) without ``force``."""
    if out.exists() and not out.is_dir():
        raise BayesPruneError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise BayesPruneError(f"--out {out}: directory is not empty; pass --force to overwrite it")


def new_net(config, input_shape, output_dim: int, *, seed: int):
    """A freshly initialised network of the config's architecture, seeded with ``seed``."""
    pyro.set_rng_seed(seed)
    return build_architecture(config.model.architecture, tuple(input_shape), output_dim, **config.model.options)


def build_model(config, dataset, net, *, prior=None):
    """The Bayesian network of the config around ``net``: ``prior`` (by default the config's
    spike-and-slab) and the likelihood of the dataset's task."""
    if prior is None:
        prior = SpikeSlabPrior(pi=config.prior.pi, tau0=math.exp(config.prior.log_tau0), tau1=math.exp(config.prior.log_tau1))
    likelihood_cls = LIKELIHOODS[dataset.task]
    options = {"scale": config.model.noise_scale} if dataset.task == "regression" else {}
    return BayesianNetwork(net, prior, likelihood_cls(dataset.num_train, **options))


def build_optim(config):
    """A Pyro optimiser, wrapped in a per-epoch learning-rate scheduler when one is configured."""
    torch_optim = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[config.optim.name]
    args = {"lr": config.optim.lr}
    if config.optim.schedule == "exponential":
        return pyro.optim.ExponentialLR({"optimizer": torch_optim, "optim_args": args, "gamma": config.optim.gamma})
    if config.optim.schedule == "cosine":
        return pyro.optim.CosineAnnealingLR({"optimizer": torch_optim, "optim_args": args, "T_max": config.train.epochs})
    return pyro.optim.PyroOptim(torch_optim, args)


def fit_posterior(config, dataset, net, device, *, checkpoint=None, progress=False, seed=None, prior=None,
                  guide_class=SpikeSlabGuide):
    """Fit the sBNN of ``config`` on ``dataset``; returns ``(model, guide, history, seconds)``.

    ``prior`` and ``guide_class`` replace the spike-and-slab pair (e.g. the plain Gaussian BNN
    baseline); the objective, optimiser, batches and epochs stay the config's.
    """
    seed = config.seed if seed is None else seed
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    model = build_model(config, dataset, net.to(device), prior=prior).to(device)
    guide = guide_class(model, init_scale=config.guide.init_scale).to(device)
    objective = OBJECTIVES[config.objective.name](
        num_particles=config.objective.num_particles,
        local_reparameterization=config.objective.local_reparameterization,
    )
    batches = TensorBatches(
        dataset.x_train.to(device), dataset.y_train.to(device), batch_size=config.data.batch_size, seed=seed
    )
    callbacks = []
    if checkpoint is not None:
        callbacks.append(Checkpoint(checkpoint, model=model, guide=guide, epochs=config.train.epochs, every=config.train.checkpoint_every))
    start = time.perf_counter()
    with pyro.validation_enabled(False):  # argument checks cost ~10x per step; the config was validated
        history = fit(
            model, guide, batches,
            objective=objective, optim=build_optim(config), epochs=config.train.epochs,
            penalty=PENALTIES[config.objective.penalty](), callbacks=callbacks, progress=progress,
        )
    return model, guide, history, time.perf_counter() - start


def load_datasets(config) -> list:
    """The dataset of the config, or one per split when ``data.splits`` is set (UCI)."""
    data = config.data
    if data.splits is None:
        return [load_dataset(data.dataset, **data.options)]
    options = {key: value for key, value in data.options.items() if key != "split"}
    first = load_dataset(data.dataset, **options)
    splits = range(uci_num_splits(options["root"], options["name"])) if data.splits == "all" else data.splits
    return [first if split == 0 else load_dataset(data.dataset, **options, split=split) for split in splits]


def load_run(run_dir):
    """Restore a saved run: ``(config, dataset, model, guide)`` from its ``config.toml`` and ``checkpoint.pt``.

    ``dataset`` is the run's first split, loaded again from the config (and ``data.root``) on the CPU;
    the model and guide hold the first chain's fitted parameters.
    """
    run_dir = Path(run_dir)
    for name in ("config.toml", CHECKPOINT):
        if not (run_dir / name).is_file():
            raise BayesPruneError(f"{run_dir}: not a run directory (no {name})")
    config = load_config(str(run_dir / "config.toml"))
    if config.experiment.name is not None:
        raise BayesPruneError(f"{run_dir}: an experiment's directory has no single fitted network")
    if config.data.splits is not None:
        first = 0 if config.data.splits == "all" else config.data.splits[0]
        config = replace(config, data=replace(config.data, splits=[first]))
    dataset = load_datasets(config)[0]
    model = build_model(config, dataset, new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed))
    guide = SpikeSlabGuide(model, init_scale=config.guide.init_scale)
    load_checkpoint(run_dir / CHECKPOINT, model=model, guide=guide)
    return config, dataset, model, guide


def run(config, out, *, force: bool = False, progress: bool = False) -> dict:
    """Execute ``config`` and write its run directory ``out``; returns the metrics."""
    out = Path(out)
    check_output_dir(out, force=force)
    if config.experiment.name is not None:
        return _run_experiment(config, out, progress=progress)
    datasets = load_datasets(config)
    new_net(config, datasets[0].input_shape, datasets[0].output_dim, seed=config.seed)  # rejects a bad architecture before anything is written
    device = resolve_device(config.device)

    staging = _staging_dir(out)
    try:
        (staging / "config.toml").write_text(config.to_toml())
        per_split = []
        for index, dataset in enumerate(datasets):
            fits = []
            for chain in range(config.chains if index == 0 else 1):
                seed = config.seed + index + chain
                net = new_net(config, dataset.input_shape, dataset.output_dim, seed=seed)
                baseline_net = copy.deepcopy(net) if chain == 0 else None
                try:
                    model, guide, history, seconds = fit_posterior(
                        config, dataset, net, device, seed=seed, progress=progress,
                        checkpoint=staging / CHECKPOINT if index == chain == 0 else None,
                    )
                except TrainingDiverged:
                    if (staging / CHECKPOINT).exists():
                        _move_into_place(staging, out)
                    raise
                if chain == 0:
                    per_split.append(_evaluate(config, dataset, model, guide, history, seconds, device, baseline_net))
                fits.append((model, guide, history))
            if index == 0:
                _write_fit(staging, history=fits[0][2], guide=fits[0][1])
                write_posterior(_inference_data(fits, dataset, config.seed), staging / POSTERIOR)
        metrics = {**_summarise(per_split), "chains": config.chains}
        (staging / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        _write_curve(staging / "pruning_curve.csv", metrics["pruning_curve"])
        write_report(staging)
        _move_into_place(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return metrics


def _run_experiment(config, out: Path, *, progress: bool) -> dict:
    from .experiments import get_experiment  # the studies fit through this module

    experiment = get_experiment(config)
    experiment.check(config)
    staging = _staging_dir(out)
    try:
        (staging / "config.toml").write_text(config.to_toml())
        metrics = experiment.run(config, staging, device=resolve_device(config.device), progress=progress)
        (staging / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        _move_into_place(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return metrics


def _staging_dir(out: Path) -> Path:
    staging = out.parent / f".{out.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def _inference_data(fits, dataset, seed):
    """ArviZ data of the chains, with ψ, φ (eqs. 3.18–3.19) and the importance of every hidden node
    (``node_importance.<layer>``) when the network is a chain of layers."""
    structure = fits[0][0]

    def importance(inclusion):
        psi, *nodes, _ = node_importance(weight_inclusion_matrices(inclusion, structure))
        values = {"psi": psi, "phi": scaled_importance(psi)}
        for layer, value in zip(hidden, nodes):
            values[f"node_importance.{layer}"] = (f"node_importance.{layer}_dim_0", value)
        return values

    try:
        _, *hidden, _ = node_layer_names(structure)
        weight_inclusion_matrices(fits[0][1].inclusion_probabilities(), structure)
    except ValueError:  # no Linear/Conv2d chain (branches, grouped convolutions): no path importance
        importance = None
    return to_inference_data(fits, dataset, feature_importance=importance, seed=seed, max_test_points=PREDICTIVE_TEST_POINTS)


def _evaluate(config, dataset, model, guide, history, seconds, device, baseline_net):
    name = metric_name(dataset.task)
    scores = guide.inclusion_probabilities()
    curve = pruning_curve(
        model, guide, dataset, scores=scores, droprates=sorted({0.0, *config.prune.droprates}),
        num_samples=config.train.predictive_samples, device=device,
    )
    probs = torch.cat([p.flatten() for p in scores.values()])
    metrics = {
        "method": config.method,
        "dataset": dataset.name,
        "task": dataset.task,
        "device": str(device),
        "architecture": config.model.architecture,
        "n_weights": guide.num_weights,
        "epochs": len(history.epoch_losses),
        "seed": config.seed,
        "train_seconds": round(seconds, 3),
        name: curve[0][name],
        f"{name}_mc": curve[0][f"{name}_mc"],
        "final_elbo": history.elbo[-1],
        "fraction_inclusion_below_half": float((probs < 0.5).float().mean()),
        "pruning_curve": curve,
    }
    if config.baseline.enabled:
        metrics[f"baseline_{name}"] = train_plain(
            baseline_net.to(device), dataset,
            epochs=config.baseline.epochs or config.train.epochs, lr=config.baseline.lr or config.optim.lr,
            batch_size=config.data.batch_size, seed=config.seed,
        )
    return metrics


def _mean_and_stderr(values):
    values = np.asarray(values, dtype=float)
    return float(values.mean()), float(values.std() / np.sqrt(values.size))


def _summarise(per_split: list) -> dict:
    """One split's metrics as they are; several splits as mean and standard error (std / sqrt(n))."""
    if len(per_split) == 1:
        return per_split[0]
    first = per_split[0]
    name = metric_name(first["task"])
    metrics = {key: value for key, value in first.items() if key != "pruning_curve"}
    metrics["splits"] = len(per_split)
    metrics["train_seconds"] = round(sum(m["train_seconds"] for m in per_split), 3)
    for key in (name, f"{name}_mc", f"baseline_{name}", "final_elbo", "fraction_inclusion_below_half"):
        if key in first:
            metrics[key], stderr = _mean_and_stderr([m[key] for m in per_split])
            metrics[f"{key}_mean"], metrics[f"{key}_stderr"] = metrics[key], stderr
    curve = []
    for rows in zip(*(m["pruning_curve"] for m in per_split)):
        row = {"droprate": rows[0]["droprate"], "n_weights_kept": rows[0]["n_weights_kept"]}
        for key in (name, f"{name}_mc"):
            row[key], row[f"{key}_stderr"] = _mean_and_stderr([r[key] for r in rows])
        curve.append(row)
    metrics["pruning_curve"] = curve
    metrics["per_split"] = [{name: m[name], f"{name}_mc": m[f"{name}_mc"]} for m in per_split]
    return metrics


def _write_curve(path: Path, curve: list):
    columns = list(curve[0])
    lines = [",".join(columns)] + [",".join(f"{row[column]:.6g}" for column in columns) for row in curve]
    path.write_text("\n".join(lines) + "\n")


def _write_fit(folder: Path, history, guide):
    elbo = ["epoch,elbo"] + [f"{epoch + 1},{value:.8g}" for epoch, value in enumerate(history.elbo)]
    (folder / "elbo.csv").write_text("\n".join(elbo) + "\n")
    probabilities = {name: p.cpu().numpy() for name, p in guide.inclusion_probabilities().items()}
    np.savez(folder / "inclusion_probabilities.npz", **probabilities)


def _move_into_place(staging: Path, out: Path):
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
