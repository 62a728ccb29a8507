"""The spike-and-slab BNN (sBNN) of paper 003 as a method plug-in (``method = "sbnn"``, table ``[sbnn]``).

Prior π·N(0, τ1²) + (1 − π)·N(0, τ0²) on every weight (eq. 3.1), mean-field q(W)q(Z) with the
closed-form inclusion probability p*(m, σ) (eq. 3.8), the objective of eqs. 3.6-3.7 with the
minibatch penalty of eq. 4.2 or 4.3, and pruning by inclusion probability.
"""

import copy
import math
import time
from dataclasses import dataclass

import pyro
import torch
from pyro.optim import PyroLRScheduler
from torch import nn

from bayesprune.analysis.importance import (
    node_importance,
    node_layer_names,
    path_scores,
    scaled_importance,
    weight_inclusion_matrices,
)
from bayesprune.analysis.inference_data import PREDICTIVE_TEST_POINTS, to_inference_data
from bayesprune.core.checkpoint import load_module_state
from bayesprune.core.errors import ConfigError
from bayesprune.core.loop import PENALTIES, svi_step
from bayesprune.core.objectives import OBJECTIVES
from bayesprune.core.optim import build_optim
from bayesprune.core.predict import metric
from bayesprune.core.structure import layer_chain
from bayesprune.core.validation import MAX_COUNT, MAX_SCALE, is_count, is_number, is_scale, require
from bayesprune.guides import SpikeSlabGuide
from bayesprune.methods import register_method
from bayesprune.methods.base import GuideFitted, Method
from bayesprune.models import LIKELIHOODS, BayesianNetwork
from bayesprune.models.priors import SpikeSlabPrior

#: Draws of W in the ELBO that chooses among several starts (``sbnn.keep = "elbo"``).
ELBO_DRAWS = 32
#: The most starts one fit makes (``sbnn.starts``): each is a whole fit.
MAX_STARTS = 32
#: ``sbnn.keep``: how a fit of several starts keeps one.
KEEP_RULES = ("elbo", "validation")
#: ``sbnn.score``: what ranks the weights for pruning (:attr:`SBNNFitted.scores`).
SCORES = ("inclusion", "path")


@dataclass(frozen=True)
class SBNNOptions:
    """``[sbnn]``: prior, guide and objective of the sBNN.

    The defaults below are a config's on packaged or image data; a CSV config takes the packaged
    ``sbnn-table`` config's values (and its ``[optim]``, ``[train]``, ``[model]`` and ``[prune]``) for
    the keys it leaves out: settings chosen on tables' held-out rows (docs/reproductions.md).

    Attributes:
        pi, log_tau0, log_tau1: spike-and-slab prior π, log τ0 < log τ1 (eq. 3.1); the defaults are
            the paper's regression setting (section 4.2).
        init_scale: initial σ of every weight in q.
        objective: a key of :data:`bayesprune.core.objectives.OBJECTIVES`.
        penalty: minibatch penalty scheme, ``uniform`` (eq. 4.2) or ``geometric`` (eq. 4.3).
        local_reparameterization: sample pre-activations instead of weights (linear layers only).
        num_particles: Monte-Carlo draws of W per step.
        predictive_samples: draws W ~ q(W) of the Monte-Carlo predictive.
        starts: one fit per factor, each from the network's initial weights and biases multiplied by
            it (``[1.0]``, the default: the paper's single fit). Not in paper 003, which fits once: on
            UCI the usual start ends in a dense optimum and smaller starts reach sparser ones of higher
            ELBO, whose curves stay flat to 25% removed but not to 50% (docs/reproductions.md, UCI
            regression), so several starts and a rule to keep one.
        keep: which start's fit is kept, by a rule that reads no test data: ``"elbo"``, the highest
            ELBO −J (eq. 3.6) on the training rows (:func:`elbo`), the paper's own objective;
            ``"validation"``, the lowest error on the training rows ``train.validation`` holds out.
        score: what ranks the weights for pruning: ``"inclusion"``, the inclusion logit B − A (eq. 3.8),
            the paper's; ``"path"``, that logit capped by the logit of the importance (section 3.5) of
            the node the weight feeds (:func:`~bayesprune.analysis.importance.path_scores`), so that
            the weights into a hidden unit whose output weights sit in the spike go with the spike.
            Not in paper 003: on UCI energy, whose fit keeps 90% of its input weights in the slab but
            half its hidden units unused, it holds the curve to 50% removed (docs/reproductions.md,
            UCI regression).
    """

    pi: float = 0.5
    log_tau0: float = -6.0
    log_tau1: float = 1.0
    init_scale: float = 0.01
    objective: str = "analytic-kl"
    penalty: str = "uniform"
    local_reparameterization: bool = False
    num_particles: int = 1
    predictive_samples: int = 20
    starts: tuple = (1.0,)
    keep: str = "elbo"
    score: str = "inclusion"

    def __post_init__(self):
        require(is_number(self.pi) and 0 < self.pi < 1, "sbnn.pi", "lie in (0, 1)", self.pi)
        # τ = exp(log τ) is held in float32: beyond ±80 it overflows or vanishes.
        require(
            is_number(self.log_tau0) and abs(self.log_tau0) <= 80, "sbnn.log_tau0", "lie in [-80, 80]", self.log_tau0
        )
        require(
            is_number(self.log_tau1) and abs(self.log_tau1) <= 80, "sbnn.log_tau1", "lie in [-80, 80]", self.log_tau1
        )
        require(
            self.log_tau0 < self.log_tau1,
            "sbnn.log_tau0",
            f"be below sbnn.log_tau1 = {self.log_tau1} (tau0 < tau1)",
            self.log_tau0,
        )
        require(
            is_scale(self.init_scale), "sbnn.init_scale", f"be a positive number up to {MAX_SCALE:g}", self.init_scale
        )
        require(self.objective in OBJECTIVES, "sbnn.objective", f"be one of {sorted(OBJECTIVES)}", self.objective)
        require(self.penalty in PENALTIES, "sbnn.penalty", f"be one of {sorted(PENALTIES)}", self.penalty)
        require(
            isinstance(self.local_reparameterization, bool),
            "sbnn.local_reparameterization",
            "be true or false",
            self.local_reparameterization,
        )
        require(
            is_count(self.num_particles),
            "sbnn.num_particles",
            f"be a positive integer up to {MAX_COUNT}",
            self.num_particles,
        )
        require(
            is_count(self.predictive_samples),
            "sbnn.predictive_samples",
            f"be a positive integer up to {MAX_COUNT}",
            self.predictive_samples,
        )
        require(isinstance(self.starts, (list, tuple)), "sbnn.starts", "be a list", self.starts)
        object.__setattr__(self, "starts", tuple(self.starts))
        require(
            0 < len(self.starts) <= MAX_STARTS
            and all(is_scale(factor) for factor in self.starts)
            and len(set(self.starts)) == len(self.starts),
            "sbnn.starts",
            f"be a list of 1 to {MAX_STARTS} positive numbers without repeats",
            list(self.starts),
        )
        require(self.keep in KEEP_RULES, "sbnn.keep", f"be one of {list(KEEP_RULES)}", self.keep)
        require(self.score in SCORES, "sbnn.score", f"be one of {list(SCORES)}", self.score)

    def prior(self) -> SpikeSlabPrior:
        return SpikeSlabPrior(pi=self.pi, tau0=math.exp(self.log_tau0), tau1=math.exp(self.log_tau1))


class SBNNFitted(GuideFitted):
    """A fitted sBNN: the :class:`~bayesprune.models.BayesianNetwork` and its :class:`~bayesprune.guides.SpikeSlabGuide`.

    Its scores are the logits B − A of the inclusion probabilities p*(m, σ) (eq. 3.8) in float64,
    which rank the weights as p* does without rounding to 1, or with ``score = "path"`` (``sbnn.score``)
    their path scores; its point estimate is the posterior mean m.
    """

    method = "sbnn"
    score = "inclusion"

    @property
    def score_name(self) -> str:
        return "inclusion logit" if self.score == "inclusion" else "path-capped inclusion logit"

    def scores(self) -> dict:
        logits = self.guide.inclusion_logits()
        return logits if self.score == "inclusion" else path_scores(logits, self.model)

    def inclusion_probabilities(self) -> dict:
        return self.guide.inclusion_probabilities()

    #: ``[{"start", <keep rule>, "kept"}]``, one per start of a fit of several (``sbnn.starts``); else ``None``.
    starts = None

    def metrics(self) -> dict:
        probs = torch.cat([p.flatten() for p in self.inclusion_probabilities().values()])
        return {
            "final_elbo": self.history.elbo[-1],
            "fraction_inclusion_below_half": float((probs < 0.5).float().mean()),
            **({} if self.starts is None else {"starts": self.starts}),
        }

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "guide": self.guide.state_dict()}

    def load_state_dict(self, state):
        load_module_state(self.model, state["model"])
        load_module_state(self.guide, state["guide"])


def build_model(net, data, prior, *, noise_scale=None, sites=None) -> BayesianNetwork:
    """The Bayesian network around ``net``: ``prior`` on its ``sites`` (the parameters of its Linear and
    convolution layers by default) and the likelihood of the data's task (Gaussian noise of scale
    ``noise_scale`` for regression, learned when ``None``)."""
    options = {"scale": noise_scale} if data.task == "regression" else {}
    return BayesianNetwork(net, prior, LIKELIHOODS[data.task](data.num_train, **options), sites=sites)


def fit_posterior(
    net, data, options: SBNNOptions, ctx, *, prior=None, guide_class=SpikeSlabGuide, stage: str = "svi"
) -> SBNNFitted:
    """Fit the sBNN of ``options`` on ``data``, starting from the weights of ``net``, in one stage
    (``stage``) of ``ctx.epochs`` epochs that early stopping acts on.

    ``prior`` and ``guide_class`` replace the spike-and-slab pair (e.g. the plain Gaussian BNN
    baseline); the objective, optimiser, batches and epochs stay the same.
    """
    if options.local_reparameterization:
        convolutions = [name for name, module in net.named_modules() if isinstance(module, nn.modules.conv._ConvNd)]
        require(
            not convolutions,
            "sbnn.local_reparameterization",
            f"be false for a network with convolutions ({convolutions[0] if convolutions else ''}): it is exact "
            "for linear layers only",
            True,
        )
    pyro.clear_param_store()
    pyro.set_rng_seed(ctx.seed)
    device = ctx.device
    model = build_model(
        net.to(device),
        data,
        options.prior() if prior is None else prior,
        noise_scale=ctx.noise_scale,
        sites=ctx.sites(net),
    ).to(device)
    guide = guide_class(model, init_scale=options.init_scale).to(device)
    fitted = SBNNFitted(model, guide, predictive_samples=options.predictive_samples)
    fitted.score = options.score
    objective = OBJECTIVES[options.objective](
        num_particles=options.num_particles,
        local_reparameterization=options.local_reparameterization,
    )
    optim = build_optim(ctx.optim, epochs=ctx.epochs)
    step = svi_step(model, guide, objective=objective, optim=optim, penalty=PENALTIES[options.penalty]())
    start = time.perf_counter()
    with pyro.validation_enabled(False):  # argument checks cost ~10x per step; the config was validated
        fitted.history = ctx.train(
            stage,
            step,
            ctx.batches(data.x_train, data.y_train),
            epochs=ctx.epochs,
            state={"model": model, "guide": guide, "optimizer": optim},
            scheduler=optim if isinstance(optim, PyroLRScheduler) else None,
            validate=fitted.predict,
        )
    fitted.seconds = time.perf_counter() - start
    fitted.best_epoch = ctx.best_epoch
    return fitted


def fit_starts(net, data, options: SBNNOptions, ctx) -> list:
    """One fit of ``options`` per factor of ``options.starts``, from ``net``'s weights and biases
    multiplied by it (each in a stage of its own, the first ``"svi"``, all from ``ctx.seed``)."""
    fits = []
    for index, factor in enumerate(options.starts):
        start = copy.deepcopy(net)
        with torch.no_grad():
            for param in start.parameters():
                param.mul_(factor)
        stage = "svi" if index == 0 else f"svi from start x{factor:g}"
        fits.append(fit_posterior(start, data, options, ctx, stage=stage))
    return fits


def elbo(fitted: SBNNFitted, data, options: SBNNOptions, *, seed: int = 0) -> float:
    """The ELBO −J(θ) (eq. 3.6) of ``fitted`` on ``data``'s training rows: the objective of ``options``
    without minibatch penalty weights, over :data:`ELBO_DRAWS` draws of W seeded with ``seed``."""
    objective = OBJECTIVES[options.objective](
        num_particles=ELBO_DRAWS, local_reparameterization=options.local_reparameterization
    )
    device = next(fitted.guide.parameters()).device
    # Pyro modules share parameters of the same name through the param store: emptied, it takes this
    # fit's own (and is left empty, so that no other fit of the same names reads them).
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    try:
        with pyro.validation_enabled(False):
            return -objective.loss(fitted.model, fitted.guide, data.x_train.to(device), data.y_train.to(device))
    finally:
        pyro.clear_param_store()


def keep_start(fits: list, data, options: SBNNOptions, ctx) -> SBNNFitted:
    """The fit ``options.keep`` keeps of ``fits`` (one per start), its ``starts`` the score of each;
    ``ctx.best_epoch`` becomes its kept epoch. Reads the training rows only (``keep = "validation"``: those
    ``ctx.validation`` holds out), never the test split."""
    if options.keep == "elbo":
        scores = [elbo(fitted, data, options, seed=ctx.seed) for fitted in fits]
        best = max(range(len(fits)), key=scores.__getitem__)
    else:
        x, y = ctx.validation
        scores = [metric(ctx.task, fitted.predict(x.to(ctx.device)).cpu(), y) for fitted in fits]
        best = min(range(len(fits)), key=scores.__getitem__)
    kept = fits[best]
    kept.starts = [
        {"start": factor, options.keep: score, "kept": index == best}
        for index, (factor, score) in enumerate(zip(options.starts, scores))
    ]
    ctx.best_epoch = kept.best_epoch
    return kept


@register_method
class SBNN(Method):
    """Spike-and-slab BNN (paper 003): variational inclusion probabilities score every weight."""

    name = "sbnn"
    Options = SBNNOptions
    summary = (
        "spike-and-slab posterior over every weight; inclusion probabilities, feature importance, variable selection"
    )
    paper = (
        "Saha, Liu, Liang (2024), "
        "[Efficient model compression for Bayesian neural networks](https://arxiv.org/abs/2411.00273)"
    )
    #: Restarts pooled on a table under ``chains = "auto"``: one fit's ψ ranks the inputs by where its
    #: optimisation ended; breast cancer and diabetes (docs/usage.md, Feature importance) need several.
    table_chains = 4
    #: The packaged config whose settings a CSV config takes for the keys it leaves out (chosen on tables'
    #: held-out rows; the general defaults are the paper's regression prior and digits' optimisation).
    table_config = "sbnn-table"
    #: Options of ``table_config`` chosen for its own network (the packaged MLP), not taken for the user's
    #: (``model.factory``, another architecture): q's means started at 0.3 times the initial weights collapse a
    #: user's MLP of two hidden layers of 100 into the spike (every inclusion probability 0.19, test RMSE
    #: 2.76 = the target's spread on a simulation; 0.45, the same output scale, collapses too), where the
    #: default start (1.0) fits it (2.05; benchmarks/importance_default.py, docs/reproductions.md).
    table_network_options = ("starts",)
    unsupported = {"optim.weight_decay": "the spike-and-slab prior regularises the weights; set it in [sbnn]"}
    legacy_keys = {
        "prior.name": None,
        "prior.pi": "pi",
        "prior.log_tau0": "log_tau0",
        "prior.log_tau1": "log_tau1",
        "guide.name": None,
        "guide.init_scale": "init_scale",
        "objective.name": "objective",
        "objective.penalty": "penalty",
        "objective.local_reparameterization": "local_reparameterization",
        "objective.num_particles": "num_particles",
        "train.predictive_samples": "predictive_samples",
    }

    def check(self, net, data, options):
        require(
            options.keep != "elbo" or list(options.starts) == [1] or torch.is_tensor(data.x_train),
            "sbnn.keep",
            "be 'validation' for training rows read a minibatch at a time (data.stream): 'elbo' scores each "
            "start on every training row at once",
            options.keep,
        )
        if options.score == "path":
            try:
                layer_chain(net)
            except ValueError as error:
                raise ConfigError(f"sbnn.score: 'path' needs a chain of Linear/Conv2d layers: {error}") from None

    def fit(self, net, data, options, ctx):
        if len(options.starts) == 1 and options.starts[0] == 1:
            return fit_posterior(net, data, options, ctx)
        require(
            options.keep != "validation" or ctx.validation is not None,
            "sbnn.keep",
            "be 'elbo' when train.validation is 0 (no training rows held out to compare the starts on)",
            options.keep,
        )
        return keep_start(fit_starts(net, data, options, ctx), data, options, ctx)

    def restore(self, net, data, options, ctx, state):
        model = build_model(net, data, options.prior(), noise_scale=ctx.noise_scale, sites=ctx.sites(net))
        guide = SpikeSlabGuide(model, init_scale=options.init_scale)
        load_module_state(model, state["model"])
        load_module_state(guide, state["guide"])
        fitted = SBNNFitted(model, guide, predictive_samples=options.predictive_samples)
        fitted.score = options.score
        return fitted

    def inference_data(self, fits, dataset, *, seed):
        """ArviZ data of the chains, with ψ, φ (eqs. 3.18–3.19) and the importance of every hidden
        node (``node_importance.<layer>``) when the network is a chain of layers."""
        structure = fits[0].model

        def importance(inclusion):
            psi, *nodes, _ = node_importance(weight_inclusion_matrices(inclusion, structure))
            values = {"psi": psi, "phi": scaled_importance(psi)}
            for layer, value in zip(hidden, nodes):
                values[f"node_importance.{layer}"] = (f"node_{len(value)}", value)  # shared by layers of one width
            return values

        try:
            _, *hidden, _ = node_layer_names(structure)
            weight_inclusion_matrices(fits[0].inclusion_probabilities(), structure)
            feature_importance = importance
        except ValueError:  # not a plain Linear/Conv2d chain (branches, batch norm, grouped convolutions)
            feature_importance = None
        chains = [(fitted.model, fitted.guide, fitted.history) for fitted in fits]
        return to_inference_data(  # as many predictive draws as the Monte-Carlo predictive: one knob for their cost
            chains,
            dataset,
            feature_importance=feature_importance,
            seed=seed,
            max_test_points=PREDICTIVE_TEST_POINTS,
            num_predictive_draws=fits[0].predictive_samples,
            predictive_outputs=[
                None if fitted.unpruned_draws is None else fitted.unpruned_draws.outputs() for fitted in fits
            ],
        )
