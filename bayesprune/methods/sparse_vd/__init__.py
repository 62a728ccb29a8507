"""Sparse Variational Dropout (Molchanov, Ashukha and Vetrov, 2017, ICML) as a method plug-in
(``method = "sparse-vd"``, table ``[sparse-vd]``).

Every weight of the ``Linear`` and convolution layers gets the improper log-uniform prior
(section 4.1) and the posterior N(θ, σ²) in the additive-noise parameterisation (θ, log σ²; eqs.
15-16), i.e. Gaussian dropout with an individual, unbounded rate α = σ²/θ² per weight. The
objective is the SGVLB with local reparameterisation (eq. 17) and the KL approximation of eq. 14
(:mod:`.distributions`), its weight annealed from 0 to 1 (the authors' code). Weights with
log α > 3 are pruned (section 5); at test time the network uses θ with them zeroed. Biases carry
no prior and no noise: they are point estimates trained by the likelihood, as in the paper.

Scores are −log α per weight in float64 (higher = keep); a budget that removes the fraction of
weights with log α > 3 masks exactly the paper's pruned weights.
"""

import time
from dataclasses import dataclass

import pyro
import pyro.optim
import torch
from pyro.optim import PyroLRScheduler

from bayesprune.core.checkpoint import load_module_state
from bayesprune.core.errors import ConfigError
from bayesprune.core.loop import svi_step
from bayesprune.core.optim import build_optim, torch_optim_and_args
from bayesprune.core.predict import evaluating
from bayesprune.core.pruning import apply_masks
from bayesprune.core.tasks import mean_loss
from bayesprune.core.validation import MAX_COUNT, is_count, is_int, is_number, require
from bayesprune.methods import register_method
from bayesprune.methods.base import Fitted, Method, with_point_estimate
from bayesprune.methods.sparse_vd.distributions import LOG_ALPHA_THRESHOLD
from bayesprune.methods.sparse_vd.model import (
    KLAnnealing,
    SparseVDELBO,
    SparseVDGuide,
    SparseVDNetwork,
    linear_decay,
    weight_sites,
)
from bayesprune.models import LIKELIHOODS


@dataclass(frozen=True)
class SparseVDOptions:
    """``[sparse-vd]``: the variational family, the objective's schedule and the pruning rule.

    Attributes:
        init_log_sigma2: initial log σ² of every weight (−10 in the authors' code); θ starts at the
            network's initial weights.
        threshold: prune where log α exceeds it (3 in the paper, a dropout rate above ~0.95).
        train_clip: zero the weights above ``threshold`` in the pre-activations while training, as
            the authors' code does for LeNets (training then sees the network that will be kept).
        kl_anneal_start, kl_anneal_end: the KL weight is 0 before epoch ``kl_anneal_start`` (0-based),
            rises linearly to 1 at ``kl_anneal_end`` and stays 1 (the authors' 5 and 20).
        linear_lr_decay: decay the rate of ``[optim]`` linearly to 0 at the last epoch, starting
            after the fraction ``lr_decay_start`` of the epochs (the authors': 0 for LeNet-5, 0.5 for
            LeNet-300-100); needs ``optim.schedule = "constant"``. False uses ``[optim]``'s schedule.
        pretrain_epochs: epochs of plain training of the deterministic network (``[optim]``) before
            the variational fit starts from its weights; 0 starts from the initial weights.
        predictive_samples: weight draws W ~ q (pruned weights zeroed) of the Monte-Carlo predictive.
    """

    init_log_sigma2: float = -10.0
    threshold: float = LOG_ALPHA_THRESHOLD
    train_clip: bool = True
    kl_anneal_start: int = 5
    kl_anneal_end: int = 20
    linear_lr_decay: bool = True
    lr_decay_start: float = 0.0
    pretrain_epochs: int = 0
    predictive_samples: int = 0

    def __post_init__(self):
        key = "sparse-vd."
        require(
            is_number(self.init_log_sigma2) and -30 <= self.init_log_sigma2 <= 10,
            key + "init_log_sigma2",
            "lie in [-30, 10]",
            self.init_log_sigma2,
        )
        require(
            is_number(self.threshold) and -8 < self.threshold < 8,
            key + "threshold",
            "lie in (-8, 8) (log alpha is clipped to [-8, 8])",
            self.threshold,
        )
        require(isinstance(self.train_clip, bool), key + "train_clip", "be true or false", self.train_clip)
        require(
            is_count(self.kl_anneal_start, 0),
            key + "kl_anneal_start",
            f"be a non-negative integer up to {MAX_COUNT}",
            self.kl_anneal_start,
        )
        require(
            is_int(self.kl_anneal_end) and self.kl_anneal_start <= self.kl_anneal_end <= MAX_COUNT,
            key + "kl_anneal_end",
            f"be an integer from sparse-vd.kl_anneal_start = {self.kl_anneal_start} up to {MAX_COUNT}",
            self.kl_anneal_end,
        )
        require(
            isinstance(self.linear_lr_decay, bool), key + "linear_lr_decay", "be true or false", self.linear_lr_decay
        )
        require(
            is_number(self.lr_decay_start) and 0 <= self.lr_decay_start < 1,
            key + "lr_decay_start",
            "lie in [0, 1)",
            self.lr_decay_start,
        )
        require(
            is_count(self.pretrain_epochs, 0),
            key + "pretrain_epochs",
            f"be a non-negative integer up to {MAX_COUNT}",
            self.pretrain_epochs,
        )
        require(
            is_count(self.predictive_samples, 0),
            key + "predictive_samples",
            f"be a non-negative integer up to {MAX_COUNT}",
            self.predictive_samples,
        )


class SparseVDFitted(Fitted):
    """A fitted Sparse VD network: the :class:`~.model.SparseVDNetwork` and its :class:`~.model.SparseVDGuide`.

    Its point estimate is θ with the weights of log α > ``threshold`` zeroed (the paper's test-time
    network), biases as fitted; its scores are −log α in float64.
    """

    method = "sparse-vd"
    score_name = "-log alpha"

    def __init__(
        self,
        model,
        guide,
        *,
        threshold: float = LOG_ALPHA_THRESHOLD,
        history=None,
        seconds: float = 0.0,
        predictive_samples: int = 0,
    ):
        super().__init__(model.net, history=history, seconds=seconds, predictive_samples=predictive_samples)
        self.model, self.guide, self.threshold = model, guide, threshold

    def scores(self) -> dict:
        return {site: -value for site, value in self.guide.log_alpha().items()}

    def log_alpha(self) -> dict:
        """log α of every weight (float64), by site."""
        return self.guide.log_alpha()

    def params(self, *, sample: bool = False) -> dict:
        """Every parameter of the network: weights (θ, or a draw of q) with log α > threshold zeroed, and biases."""
        weights = self.guide.sample_params(self.threshold) if sample else self.guide.mean_params(self.threshold)
        with torch.no_grad():
            points = {name: value.detach().clone() for name, value in self.model.point_params().items()}
        return {**weights, **points}

    @torch.no_grad()
    def _predict(self, x, *, masks=None, num_samples=0, batch_size: int = 4096):
        """The point estimate's prediction, or the mean over ``num_samples`` draws of q, one draw held at a time."""
        total = 0.0
        with evaluating(self.net):
            for _ in range(max(num_samples, 1)):
                params = self.params(sample=num_samples > 0)
                params = apply_masks(params, masks) if masks else params
                total = total + torch.cat(
                    [
                        self.model.likelihood.mean(self.model.network(params, chunk))
                        for chunk in torch.split(x, batch_size)
                    ]
                )
        return total / max(num_samples, 1)

    def network(self):
        return with_point_estimate(self.net, self.params())

    def metrics(self) -> dict:
        log_alpha = self.log_alpha()
        removed = {site: int((value > self.threshold).sum()) for site, value in log_alpha.items()}
        total = sum(value.numel() for value in log_alpha.values())
        kept = total - sum(removed.values())
        return {
            **({"final_elbo": self.history.elbo[-1]} if self.history is not None and self.history.epoch_losses else {}),
            "log_alpha_threshold": self.threshold,
            "fraction_removed_by_threshold": sum(removed.values()) / total,
            "compression_by_threshold": total / max(kept, 1),
            "layer_fraction_removed": {site: removed[site] / log_alpha[site].numel() for site in log_alpha},
        }

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "guide": self.guide.state_dict()}

    def load_state_dict(self, state):
        load_module_state(self.model, state["model"])
        load_module_state(self.guide, state["guide"])


def build_model(net, data, *, noise_scale=None) -> SparseVDNetwork:
    """The Sparse VD network around ``net`` with the likelihood of the data's task."""
    options = {"scale": noise_scale} if data.task == "regression" else {}
    return SparseVDNetwork(net, LIKELIHOODS[data.task](data.num_train, **options))


def build_optimizer(options: SparseVDOptions, optim, *, epochs: int):
    """The Pyro optimiser: ``[optim]``'s optimiser, with the linear decay to 0 when asked."""
    if not options.linear_lr_decay:
        return build_optim(optim, epochs=epochs)
    if optim.schedule != "constant":
        raise ConfigError(
            f"sparse-vd.linear_lr_decay must be false when optim.schedule = {optim.schedule!r} "
            "(the two schedules exclude each other)"
        )
    torch_optim, args = torch_optim_and_args(optim)
    return pyro.optim.LambdaLR(
        {"optimizer": torch_optim, "optim_args": args, "lr_lambda": linear_decay(epochs, options.lr_decay_start)}
    )


@register_method
class SparseVD(Method):
    """Sparse Variational Dropout: per-weight dropout rates α under a log-uniform prior; prune log α > 3."""

    name = "sparse-vd"
    Options = SparseVDOptions
    quick = ("sparse-vd.kl_anneal_start=0", "sparse-vd.kl_anneal_end=1")
    summary = "Sparse Variational Dropout: a dropout rate per weight under a log-uniform prior; weights with log α > 3 removed"
    paper = (
        "Molchanov, Ashukha, Vetrov (2017), "
        "[Variational dropout sparsifies deep neural networks](https://arxiv.org/abs/1701.05369), ICML"
    )

    def unsupported_for(self, options) -> dict:
        """``[optim]`` keys the fit does not read: the schedule under ``linear_lr_decay`` (the paper's
        linear decay replaces it, pre-training included), weight decay without pre-training (the
        log-uniform prior regularises the variational fit)."""
        unread = {}
        if options.linear_lr_decay:
            why = "sparse-vd.linear_lr_decay = true decays the rate linearly to 0 instead; set it to false for [optim]'s schedule"
            unread["optim.schedule"] = why  # optim.gamma is read by the exponential schedule alone
        if options.pretrain_epochs == 0:
            unread["optim.weight_decay"] = (
                "the log-uniform prior regularises the weights; weight decay acts only on "
                "sparse-vd.pretrain_epochs of plain training"
            )
        return unread

    def check(self, net, data, options):
        """Refuse a network without a ``Linear`` or convolution weight: nothing would carry the prior."""
        if not weight_sites(net):
            raise ConfigError("model.architecture has no Linear or convolution layer for sparse-vd to put its prior on")

    def fit(self, net, data, options, ctx):
        pyro.clear_param_store()
        pyro.set_rng_seed(ctx.seed)
        device = ctx.device
        net = net.to(device)
        batches = ctx.batches(data.x_train, data.y_train)
        start = time.perf_counter()
        if options.pretrain_epochs:
            ctx.train_network("pretrain", net, batches, epochs=options.pretrain_epochs, loss=mean_loss(data.task))
        model = build_model(net, data, noise_scale=ctx.noise_scale).to(device)
        guide = SparseVDGuide(model, init_log_sigma2=options.init_log_sigma2).to(device)
        fitted = SparseVDFitted(
            model, guide, threshold=options.threshold, predictive_samples=options.predictive_samples
        )
        annealing = KLAnnealing(start=options.kl_anneal_start, end=options.kl_anneal_end)
        objective = SparseVDELBO(annealing=annealing, train_clip=options.train_clip, threshold=options.threshold)
        optim = build_optimizer(options, ctx.optim, epochs=ctx.epochs)
        step = svi_step(model, guide, objective=objective, optim=optim)
        with pyro.validation_enabled(False):  # argument checks cost much per step; the options were validated
            fitted.history = ctx.train(
                "svi",
                step,
                batches,
                epochs=ctx.epochs,
                state={"model": model, "guide": guide, "optimizer": optim},
                scheduler=optim if isinstance(optim, PyroLRScheduler) else None,
                callbacks=[annealing],
                validate=fitted.predict,
            )
        fitted.seconds = time.perf_counter() - start
        return fitted

    def restore(self, net, data, options, ctx, state):
        model = build_model(net, data, noise_scale=ctx.noise_scale)
        guide = SparseVDGuide(model, init_log_sigma2=options.init_log_sigma2)
        load_module_state(model, state["model"])
        load_module_state(guide, state["guide"])
        return SparseVDFitted(model, guide, threshold=options.threshold, predictive_samples=options.predictive_samples)

    def inference_data(self, fits, data, *, seed):
        """θ, log σ² and log α of the chains and weight draws of q (:func:`.inference_data.to_inference_data`),
        with as many predictive draws as the Monte-Carlo predictive makes (20 where it makes none)."""
        from bayesprune.methods.sparse_vd.inference_data import to_inference_data

        return to_inference_data(fits, data, seed=seed, num_predictive_draws=fits[0].predictive_samples or 20)

    def report_sections(self, run_dir, metrics):
        """The fraction of weights log α > threshold removes, per layer, and the histogram of log α."""
        from bayesprune.methods.sparse_vd.report import report_sections

        return report_sections(run_dir, metrics)
