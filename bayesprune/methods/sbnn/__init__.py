"""The spike-and-slab BNN (sBNN) of paper 003 as a method plug-in (``method = "sbnn"``, table ``[sbnn]``).

Prior π·N(0, τ1²) + (1 − π)·N(0, τ0²) on every weight (eq. 3.1), mean-field q(W)q(Z) with the
closed-form inclusion probability p*(m, σ) (eq. 3.8), the objective of eqs. 3.6-3.7 with the
minibatch penalty of eq. 4.2 or 4.3, and pruning by inclusion probability.
"""
import math
import time
from dataclasses import dataclass

import pyro
import torch
from torch import nn

from bayesprune.analysis.importance import node_importance, node_layer_names, scaled_importance, weight_inclusion_matrices
from bayesprune.analysis.inference_data import to_inference_data
from bayesprune.checkpoint import Checkpoint, load_module_state
from bayesprune.fit import PENALTIES, LoopState, TensorBatches, fit, set_rng_state
from bayesprune.guides import SpikeSlabGuide
from bayesprune.models import LIKELIHOODS, BayesianNetwork
from bayesprune.objectives import OBJECTIVES
from bayesprune.optim import build_optim
from bayesprune.priors import SpikeSlabPrior
from bayesprune.validation import is_int, is_number, require

from .. import register_method
from ..base import GuideFitted, Method

#: Test points in the posterior predictive of ``posterior.nc`` (it stores one draw per point per draw).
PREDICTIVE_TEST_POINTS = 1000


@dataclass(frozen=True)
class SBNNOptions:
    """``[sbnn]``: prior, guide and objective of the sBNN.

    Attributes:
        pi, log_tau0, log_tau1: spike-and-slab prior π, log τ0 < log τ1 (eq. 3.1); the defaults are
            the paper's regression setting (section 4.2).
        init_scale: initial σ of every weight in q.
        objective: a key of :data:`bayesprune.objectives.OBJECTIVES`.
        penalty: minibatch penalty scheme, ``uniform`` (eq. 4.2) or ``geometric`` (eq. 4.3).
        local_reparameterization: sample pre-activations instead of weights (linear layers only).
        num_particles: Monte-Carlo draws of W per step.
        predictive_samples: draws W ~ q(W) of the Monte-Carlo predictive.
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

    def __post_init__(self):
        require(is_number(self.pi) and 0 < self.pi < 1, "sbnn.pi", "lie in (0, 1)", self.pi)
        # τ = exp(log τ) is held in float32: beyond ±80 it overflows or vanishes.
        require(is_number(self.log_tau0) and abs(self.log_tau0) <= 80, "sbnn.log_tau0", "lie in [-80, 80]", self.log_tau0)
        require(is_number(self.log_tau1) and abs(self.log_tau1) <= 80, "sbnn.log_tau1", "lie in [-80, 80]", self.log_tau1)
        require(self.log_tau0 < self.log_tau1, "sbnn.log_tau0", f"be below sbnn.log_tau1 = {self.log_tau1} (tau0 < tau1)", self.log_tau0)
        require(is_number(self.init_scale) and self.init_scale > 0, "sbnn.init_scale", "be a positive number", self.init_scale)
        require(self.objective in OBJECTIVES, "sbnn.objective", f"be one of {sorted(OBJECTIVES)}", self.objective)
        require(self.penalty in PENALTIES, "sbnn.penalty", f"be one of {sorted(PENALTIES)}", self.penalty)
        require(isinstance(self.local_reparameterization, bool), "sbnn.local_reparameterization", "be true or false", self.local_reparameterization)
        require(is_int(self.num_particles) and self.num_particles > 0, "sbnn.num_particles", "be a positive integer", self.num_particles)
        require(is_int(self.predictive_samples) and self.predictive_samples > 0, "sbnn.predictive_samples", "be a positive integer", self.predictive_samples)

    def prior(self) -> SpikeSlabPrior:
        return SpikeSlabPrior(pi=self.pi, tau0=math.exp(self.log_tau0), tau1=math.exp(self.log_tau1))


class SBNNFitted(GuideFitted):
    """A fitted sBNN: the :class:`~bayesprune.models.BayesianNetwork` and its :class:`~bayesprune.guides.SpikeSlabGuide`.

    Its scores are the logits B − A of the inclusion probabilities p*(m, σ) (eq. 3.8) in float64,
    which rank the weights as p* does without rounding to 1; its point estimate is the posterior mean m.
    """

    method = "sbnn"
    score_name = "inclusion logit"

    def scores(self) -> dict:
        return self.guide.inclusion_logits()

    def inclusion_probabilities(self) -> dict:
        return self.guide.inclusion_probabilities()

    def metrics(self) -> dict:
        probs = torch.cat([p.flatten() for p in self.inclusion_probabilities().values()])
        return {
            "final_elbo": self.history.elbo[-1],
            "fraction_inclusion_below_half": float((probs < 0.5).float().mean()),
        }

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "guide": self.guide.state_dict()}

    def load_state_dict(self, state):
        load_module_state(self.model, state["model"])
        load_module_state(self.guide, state["guide"])


def build_model(config, dataset, net, *, prior=None):
    """The Bayesian network around ``net``: ``prior`` (by default the config's spike-and-slab) and
    the likelihood of the dataset's task."""
    prior = config.method_options.prior() if prior is None else prior
    likelihood_cls = LIKELIHOODS[dataset.task]
    options = {"scale": config.model.noise_scale} if dataset.task == "regression" else {}
    return BayesianNetwork(net, prior, likelihood_cls(dataset.num_train, **options))


def fit_posterior(config, dataset, net, device, *, checkpoint=None, progress=False, seed=None, prior=None,
                  guide_class=SpikeSlabGuide, callbacks=(), resume=None) -> SBNNFitted:
    """Fit the sBNN of ``config`` on ``dataset``, starting from the weights of ``net``.

    ``prior`` and ``guide_class`` replace the spike-and-slab pair (e.g. the plain Gaussian BNN
    baseline); the objective, optimiser, batches and epochs stay the config's. ``callbacks`` and
    ``resume`` (a checkpoint of this fit, as read) as in :meth:`bayesprune.methods.Method.fit`.
    """
    options = config.method_options
    if options.local_reparameterization:
        convolutions = [name for name, module in net.named_modules() if isinstance(module, nn.modules.conv._ConvNd)]
        require(not convolutions, "sbnn.local_reparameterization",
                f"be false for a network with convolutions ({convolutions[0] if convolutions else ''}): it is exact "
                "for linear layers only", True)
    seed = config.seed if seed is None else seed
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    model = build_model(config, dataset, net.to(device), prior=prior).to(device)
    guide = guide_class(model, init_scale=options.init_scale).to(device)
    fitted = SBNNFitted(model, guide, predictive_samples=options.predictive_samples)
    objective = OBJECTIVES[options.objective](
        num_particles=options.num_particles, local_reparameterization=options.local_reparameterization,
    )
    batches = TensorBatches(
        dataset.x_train.to(device), dataset.y_train.to(device), batch_size=config.data.batch_size, seed=seed
    )
    optim = build_optim(config.optim, epochs=config.train.epochs)
    callbacks = [make(fitted) for make in callbacks]
    stateful = [callback for callback in callbacks if hasattr(callback, "state_dict")]
    if checkpoint is not None:
        callbacks.append(Checkpoint(checkpoint, fitted, epochs=config.train.epochs, every=config.train.checkpoint_every,
                                    optimizer=optim, batches=batches, stateful=stateful))
    loop = None
    if resume is not None:
        loop = LoopState.from_state_dict(resume["loop"])
        load_module_state(model, resume["state"]["model"])
        load_module_state(guide, resume["state"]["guide"])
        optim.set_state(loop.optimizer)
        batches.generator.set_state(loop.batches)
        for callback, state in zip(stateful, loop.callbacks, strict=True):
            callback.load_state_dict(state)
        set_rng_state(loop.rng)
    start = time.perf_counter()
    with pyro.validation_enabled(False):  # argument checks cost ~10x per step; the config was validated
        fitted.history = fit(
            model, guide, batches, objective=objective, optim=optim, epochs=config.train.epochs,
            penalty=PENALTIES[options.penalty](), callbacks=callbacks, progress=progress, resume=loop,
        )
    fitted.seconds = time.perf_counter() - start
    return fitted


@register_method
class SBNN(Method):
    """Spike-and-slab BNN (paper 003): variational inclusion probabilities score every weight."""

    name = "sbnn"
    resumable = True
    Options = SBNNOptions
    legacy_keys = {
        "prior.name": None, "prior.pi": "pi", "prior.log_tau0": "log_tau0", "prior.log_tau1": "log_tau1",
        "guide.name": None, "guide.init_scale": "init_scale",
        "objective.name": "objective", "objective.penalty": "penalty",
        "objective.local_reparameterization": "local_reparameterization", "objective.num_particles": "num_particles",
        "train.predictive_samples": "predictive_samples",
    }

    def fit(self, net, dataset, config, *, device, seed, checkpoint=None, progress=False, callbacks=(), resume=None):
        return fit_posterior(config, dataset, net, device, seed=seed, checkpoint=checkpoint, progress=progress,
                             callbacks=callbacks, resume=resume)

    def restore(self, net, dataset, config, state):
        model = build_model(config, dataset, net)
        guide = SpikeSlabGuide(model, init_scale=config.method_options.init_scale)
        load_module_state(model, state["model"])
        load_module_state(guide, state["guide"])
        return SBNNFitted(model, guide, predictive_samples=config.method_options.predictive_samples)

    def inference_data(self, fits, dataset, *, seed):
        """ArviZ data of the chains, with ψ, φ (eqs. 3.18–3.19) and the importance of every hidden
        node (``node_importance.<layer>``) when the network is a chain of layers."""
        structure = fits[0].model

        def importance(inclusion):
            psi, *nodes, _ = node_importance(weight_inclusion_matrices(inclusion, structure))
            values = {"psi": psi, "phi": scaled_importance(psi)}
            for layer, value in zip(hidden, nodes):
                values[f"node_importance.{layer}"] = (f"node_importance.{layer}_dim_0", value)
            return values

        try:
            _, *hidden, _ = node_layer_names(structure)
            weight_inclusion_matrices(fits[0].inclusion_probabilities(), structure)
            feature_importance = importance
        except ValueError:  # not a plain Linear/Conv2d chain (branches, batch norm, grouped convolutions)
            feature_importance = None
        chains = [(fitted.model, fitted.guide, fitted.history) for fitted in fits]
        return to_inference_data(chains, dataset, feature_importance=feature_importance, seed=seed,
                                 max_test_points=PREDICTIVE_TEST_POINTS)
