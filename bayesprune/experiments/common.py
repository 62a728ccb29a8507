"""Shared machinery of the paper's simulation studies (paper 003, section 4.1).

* :class:`Experiment`: the base of every registered study. It owns the option schema (defaults plus
  one validator per key), so ``check`` rejects an unknown or malformed option with a one-line
  :class:`~bayesprune.core.errors.ConfigError` that names the field (``experiment.alphas must ...``).
* :func:`fit_importance`: fit the sBNN of a config on a dataset and return ψ (eq. 3.18) and φ (eq. 3.19).
* :data:`SIMULATION_CONFIG`, :func:`simulation_config` and :func:`sbnn_fit_predict`: the paper's
  simulation network and its sBNN refit inside BNN_VS cross-validation
  (:func:`~bayesprune.analysis.selection.select_by_cross_validation` takes it as ``fit_predict``).
* Baseline fits on the same split: :func:`fit_plain_net` (NN, NN with dropout), :func:`fit_gaussian_bnn`
  (mean-field Gaussian BNN with an N(0, s²) prior) and :func:`nn_fit_predict` (a cheap refit for
  cross-validation).
* :func:`criterion`, :func:`write_report` and :func:`plot_series`
  for the figures and ``report.md`` of a run (tables: :mod:`bayesprune.analysis.tables`).
"""

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from bayesprune.analysis.importance import feature_importance, scaled_importance, weight_inclusion_matrices
from bayesprune.analysis.plots import plt, save_figure
from bayesprune.core.errors import ConfigError
from bayesprune.core.loop import resolve_device
from bayesprune.core.plain import fit_plain
from bayesprune.core.predict import predict
from bayesprune.core.validation import is_number as _is_number
from bayesprune.data import REGRESSION, Dataset, load_dataset
from bayesprune.guides import NormalGuide
from bayesprune.methods import FitContext
from bayesprune.methods.sbnn import fit_posterior
from bayesprune.models import new_net
from bayesprune.models.priors import GaussianPrior
from bayesprune.pipeline.config import RunConfig

# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------


def _fail(key, requirement, value):
    raise ConfigError(f"experiment.{key} must {requirement}, got {value!r}")


def number(low=-math.inf, high=math.inf, *, open_low=False, integer=False):
    """Validator of one number in [low, high] (or (low, high] with ``open_low``)."""
    kind = "an integer" if integer else "a number"

    def validate(key, value):
        ok = _is_number(value) and (not integer or isinstance(value, int))
        ok = ok and (value > low if open_low else value >= low) and value <= high
        if not ok:
            _fail(key, f"be {kind} in {'(' if open_low else '['}{low}, {high}]", value)
        return value

    return validate


def number_list(low=-math.inf, high=math.inf, *, open_low=False, min_length=1):
    """Validator of a list of at least ``min_length`` distinct numbers, each as :func:`number`."""
    element = number(low, high, open_low=open_low)

    def validate(key, value):
        if not isinstance(value, (list, tuple)) or len(value) < min_length or len(set(value)) != len(value):
            _fail(key, f"be a list of at least {min_length} distinct numbers", value)
        for item in value:
            try:
                element(key, item)
            except ConfigError:
                _fail(key, f"contain only numbers in {'(' if open_low else '['}{low}, {high}]", item)
        return [float(item) for item in value]

    return validate


def choice(choices):
    """Validator of one of ``choices``."""

    def validate(key, value):
        if value not in choices:
            _fail(key, f"be one of {sorted(choices)}", value)
        return value

    return validate


def choice_list(choices):
    """Validator of a non-empty list of distinct members of ``choices``."""

    def validate(key, value):
        if (
            not isinstance(value, (list, tuple))
            or not value
            or len(set(value)) != len(value)
            or any(v not in choices for v in value)
        ):
            _fail(key, f"be a non-empty list of distinct members of {sorted(choices)}", value)
        return list(value)

    return validate


def boolean(key, value):
    """Validator of ``true`` / ``false``."""
    if not isinstance(value, bool):
        _fail(key, "be true or false", value)
    return value


class Experiment:
    """A packaged study. Subclasses set ``dataset`` (the loader they sweep), ``options`` (option name →
    ``(default, validator)``) and implement :meth:`run`.
    """

    dataset: str = ""
    options: dict = {}

    def resolve(self, config) -> dict:
        """The experiment options of ``config`` over the defaults, validated."""
        given = dict(config.experiment.options)
        for key in given:
            if key not in self.options:
                raise ConfigError(
                    f"experiment.{key} is not an option of {config.experiment.name!r}; options: {sorted(self.options)}"
                )
        return {key: validate(key, given.get(key, default)) for key, (default, validate) in self.options.items()}

    def check(self, config):
        """Reject a config this study cannot run (wrong dataset, bad options) before anything is written."""
        if config.data.dataset != self.dataset:
            raise ConfigError(
                f"data.dataset must be {self.dataset!r} for experiment {config.experiment.name!r}, "
                f"got {config.data.dataset!r}"
            )
        if config.model.architecture != "mlp":
            raise ConfigError(
                f"model.architecture must be 'mlp' for experiment {config.experiment.name!r}, "
                f"got {config.model.architecture!r}"
            )
        adaptive = {
            "train.steps": config.train.steps is not None,
            "train.validation": config.train.validation > 0,
            "data.batch_size": config.data.batch_size == "auto",
        }
        for key, given in adaptive.items():
            if given:
                raise ConfigError(
                    f"{key}: a study's fits use fixed epochs and batches; not for experiment {config.experiment.name!r}"
                )
        self.validate(config, self.resolve(config))

    def validate(self, config, options):
        """Checks across options; the hook subclasses override."""

    def run(self, config, folder: Path, *, device, progress: bool = False) -> dict:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# Fits
# ---------------------------------------------------------------------------------------------

# The paper's simulation network (section 4.1: two hidden layers of 20 and 10 nodes) with a prior
# that separates relevant from irrelevant inputs on the simulated data (see tests/analysis/test_importance.py).
SIMULATION_CONFIG = {
    "device": "cpu",
    "data": {"dataset": "feature-selection", "batch_size": 256},
    "model": {"architecture": "mlp", "hidden": [20, 10]},
    "sbnn": {"pi": 0.5, "log_tau0": -2.0, "log_tau1": 0.0},
    "optim": {"lr": 0.01},
    "train": {"epochs": 100},
    "baseline": {"enabled": False},
}


def simulation_config(**sections):
    """:data:`SIMULATION_CONFIG` as a :class:`~bayesprune.pipeline.config.RunConfig`, ``sections`` updating its tables."""
    raw = {key: dict(value) if isinstance(value, dict) else value for key, value in SIMULATION_CONFIG.items()}
    for key, value in sections.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) else value
    return RunConfig.from_dict(raw)


def sbnn_fit_predict(config=None, *, device=None):
    """A ``fit_predict`` that fits the sBNN of ``config`` and predicts with its posterior-mean network.

    Args:
        config: a :class:`~bayesprune.pipeline.config.RunConfig`; its model, prior, guide, objective, optim
            and train sections are used. Defaults to :func:`simulation_config`.
        device: training device; defaults to ``config.device``.

    Returns:
        ``fit_predict(x_train, y_train, x_test) -> y_pred`` for regression targets (float ``y``).
    """
    config = config if config is not None else simulation_config()
    device = config.torch_device if device is None else resolve_device(device)

    def fit_predict(x_train, y_train, x_test):
        if not y_train.is_floating_point():
            raise ValueError("sbnn_fit_predict supports regression (floating-point targets) only")
        fold = Dataset(
            name="cross-validation-fold",
            task=REGRESSION,
            x_train=x_train,
            y_train=y_train,
            x_test=x_test,
            y_test=torch.zeros(len(x_test)),
            input_shape=tuple(x_train.shape[1:]),
            num_classes=None,
        )
        net = new_net(config, fold.input_shape, fold.output_dim, seed=config.seed)
        ctx = FitContext.from_config(config, fold, device=device)
        return fit_posterior(net, fold, config.method_options, ctx).predict(x_test.to(device)).cpu()

    return fit_predict


def load(config, **overrides):
    """The config's dataset with its ``[data]`` options, ``overrides`` replacing some (e.g. ``alpha``)."""
    return load_dataset(config.data.dataset, **{**config.data.options, **overrides})


@dataclass(frozen=True)
class ImportanceFit:
    """An sBNN fitted on one dataset, with its feature importances.

    Attributes:
        model, guide: the fitted ``BayesianNetwork`` and ``SpikeSlabGuide``.
        psi: ψ of every input feature (eq. 3.18).
        phi: φ, the min-max scaled ψ (eq. 3.19).
        seconds: training time.
    """

    model: object
    guide: object
    psi: torch.Tensor
    phi: torch.Tensor
    seconds: float

    def predict(self, x):
        return predict(self.model, self.guide, x.to(self.guide.loc.device)).cpu()


def fit_importance(config, dataset, *, device, seed=None) -> ImportanceFit:
    """Fit the sBNN of ``config`` on ``dataset`` and compute ψ and φ of its inputs."""
    seed = config.seed if seed is None else seed
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=seed)
    ctx = FitContext.from_config(config, dataset, device=device, seed=seed)
    fitted = fit_posterior(net, dataset, config.method_options, ctx)
    psi = feature_importance(weight_inclusion_matrices(fitted.inclusion_probabilities(), fitted.net)).cpu()
    return ImportanceFit(fitted.model, fitted.guide, psi, scaled_importance(psi), ctx.training_cost()["train_seconds"])


@dataclass(frozen=True)
class AveragedImportance:
    """ψ averaged over ``repeats`` independent sBNN fits (seeds ``config.seed``, ``+1``, …) and its φ."""

    psi: torch.Tensor
    phi: torch.Tensor
    seconds: float


def averaged_importance(config, dataset, *, device, repeats: int = 1) -> AveragedImportance:
    """Mean ψ (eq. 3.18) over ``repeats`` fits from different initialisations, and φ (eq. 3.19) of that mean.

    One fit's ψ carries the noise of its initialisation and minibatch order; averaging over restarts
    estimates the posterior's importance rather than one optimisation path's.
    """
    fits = [fit_importance(config, dataset, device=device, seed=config.seed + r) for r in range(repeats)]
    psi = torch.stack([fit.psi for fit in fits]).mean(dim=0)
    return AveragedImportance(psi, scaled_importance(psi), sum(fit.seconds for fit in fits))


def with_dropout(net: nn.Sequential, rate: float) -> nn.Sequential:
    """``net`` with ``nn.Dropout(rate)`` after every activation (the NN_Dr baseline)."""
    layers = []
    for layer in net:
        layers.append(layer)
        if not isinstance(layer, (nn.Linear, nn.Flatten)):
            layers.append(nn.Dropout(rate))
    return nn.Sequential(*layers)


def fit_plain_net(config, x, y, *, seed: int, dropout: float = 0.0, epochs=None):
    """A plain MLP of the config's shape trained by least squares (Adam, the config's lr and batch size)."""
    net = new_net(config, x.shape[1:], 1, seed=seed)
    if dropout > 0:
        net = with_dropout(net, dropout)
    return fit_plain(
        net,
        x,
        y,
        epochs=epochs or config.train.epochs,
        lr=config.optim.lr,
        batch_size=config.data.batch_size,
        seed=seed,
    )


def nn_fit_predict(config, *, epochs: int, seed: int):
    """A ``fit_predict(x_train, y_train, x_test)`` refitting a plain MLP of the config's shape."""

    def fit_predict(x_train, y_train, x_test):
        net = fit_plain_net(config, x_train, y_train, seed=seed, epochs=epochs)
        with torch.no_grad():
            return net(x_test).squeeze(-1)

    return fit_predict


def fit_gaussian_bnn(config, dataset, *, device, seed: int, scale: float = 1.0):
    """A mean-field Gaussian BNN with an N(0, scale²) prior on every weight (the plain "BNN" baseline).

    Same network, likelihood, objective, optimiser, epochs and batch size as the config's sBNN
    (:func:`~bayesprune.methods.sbnn.fit_posterior` with the Gaussian prior and guide).

    Returns:
        ``(model, guide)``; predict with :func:`bayesprune.core.predict.predict`.
    """
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=seed)
    fitted = fit_posterior(
        net,
        dataset,
        config.method_options,
        FitContext.from_config(config, dataset, device=device, seed=seed),
        prior=GaussianPrior(scale=scale),
        guide_class=NormalGuide,
    )
    return fitted.model, fitted.guide


def mse_on_test(prediction: torch.Tensor, dataset) -> float:
    """Test mean squared error in the targets' original units."""
    residual = prediction.reshape(dataset.y_test.shape).double().cpu() - dataset.y_test.double()
    return float(dataset.target_std**2 * residual.pow(2).mean())


class Stopwatch:
    """Seconds since creation (``float(watch)``)."""

    def __init__(self):
        self.start = time.perf_counter()

    def __float__(self):
        return time.perf_counter() - self.start


# ---------------------------------------------------------------------------------------------
# Figures, report
# ---------------------------------------------------------------------------------------------


def criterion(text: str, passed: bool) -> str:
    """One line of a report's done-when list."""
    return f"- **{'PASS' if passed else 'FAIL'}**: {text}"


def write_report(folder: Path, title: str, sections: list):
    """``report.md``: a title, then the sections (markdown strings) separated by blank lines."""
    (Path(folder) / "report.md").write_text("\n\n".join([f"# {title}", *sections]) + "\n")


def plot_series(path: Path, x, series: dict, *, xlabel: str, ylabel: str, title: str, markers: str = "o-"):
    """Line plot of ``series`` (label → y values) against ``x``."""
    figure, axis = plt.subplots(figsize=(5.5, 3.8))
    for label, values in series.items():
        axis.plot(x, values, markers, label=label, markersize=4)
    axis.set(xlabel=xlabel, ylabel=ylabel, title=title)
    axis.legend()
    save_figure(figure, path)
