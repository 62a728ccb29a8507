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
from pathlib import Path

import numpy as np
import pyro
import pyro.optim
import torch

from bayesprune.analysis.evaluation import metric_name, pruning_curve
from bayesprune.analysis.report import write_report
from bayesprune.guides import SpikeSlabGuide
from bayesprune.models import LIKELIHOODS, BayesianNetwork, build_architecture

from .baseline import train_plain
from .checkpoint import Checkpoint
from .data import load_dataset
from .errors import BayesPruneError, TrainingDiverged
from .fit import PENALTIES, TensorBatches, fit, resolve_device
from .objectives import OBJECTIVES
from .priors import SpikeSlabPrior

CHECKPOINT = "checkpoint.pt"


def check_output_dir(out: Path, *, force: bool):
    """Refuse to overwrite a non-empty directory (or a file) without ``force``."""
    if out.exists() and not out.is_dir():
        raise BayesPruneError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise BayesPruneError(f"--out {out}: directory is not empty; pass --force to overwrite it")


def build_model(config, dataset, net):
    """The Bayesian network of the config: prior policy and likelihood around ``net``."""
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


def fit_posterior(config, dataset, net, device, *, checkpoint=None, progress=False, seed=None):
    """Fit the sBNN of ``config`` on ``dataset``; returns ``(model, guide, history, seconds)``."""
    seed = config.seed if seed is None else seed
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    model = build_model(config, dataset, net.to(device)).to(device)
    guide = SpikeSlabGuide(model, init_scale=config.guide.init_scale).to(device)
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
    history = fit(
        model, guide, batches,
        objective=objective, optim=build_optim(config), epochs=config.train.epochs,
        penalty=PENALTIES[config.objective.penalty](), callbacks=callbacks, progress=progress,
    )
    return model, guide, history, time.perf_counter() - start


def run(config, out, *, force: bool = False, progress: bool = False) -> dict:
    """Execute ``config`` and write its run directory ``out``; returns the metrics."""
    out = Path(out)
    check_output_dir(out, force=force)
    dataset = load_dataset(config.data.dataset, **config.data.options)
    net = build_architecture(config.model.architecture, dataset.input_shape, dataset.output_dim, **config.model.options)
    device = resolve_device(config.device)
    baseline_net = copy.deepcopy(net)

    staging = out.parent / f".{out.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        (staging / "config.toml").write_text(config.to_toml())
        try:
            model, guide, history, seconds = fit_posterior(
                config, dataset, net, device, checkpoint=staging / CHECKPOINT, progress=progress
            )
        except TrainingDiverged:
            if (staging / CHECKPOINT).exists():
                _move_into_place(staging, out)
            raise
        metrics = _evaluate(config, dataset, model, guide, history, seconds, device, baseline_net)
        _write_outputs(staging, metrics, history, guide)
        write_report(staging)
        _move_into_place(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return metrics


def _evaluate(config, dataset, model, guide, history, seconds, device, baseline_net):
    name = metric_name(dataset.task)
    curve = pruning_curve(
        model, guide, dataset,
        scores=guide.inclusion_probabilities(), droprates=sorted({0.0, *config.prune.droprates}),
        num_samples=config.train.predictive_samples, device=device,
    )
    full = curve[0]
    probs = torch.cat([p.flatten() for p in guide.inclusion_probabilities().values()])
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
        name: full[name],
        f"{name}_mc": full[f"{name}_mc"],
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


def _write_outputs(folder: Path, metrics: dict, history, guide):
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    curve = metrics["pruning_curve"]
    columns = list(curve[0])
    lines = [",".join(columns)] + [",".join(f"{row[column]:.6g}" for column in columns) for row in curve]
    (folder / "pruning_curve.csv").write_text("\n".join(lines) + "\n")
    elbo = ["epoch,elbo"] + [f"{epoch + 1},{value:.8g}" for epoch, value in enumerate(history.elbo)]
    (folder / "elbo.csv").write_text("\n".join(elbo) + "\n")
    np.savez(folder / "inclusion_probabilities.npz", **{n: p.cpu().numpy() for n, p in guide.inclusion_probabilities().items()})


def _move_into_place(staging: Path, out: Path):
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
