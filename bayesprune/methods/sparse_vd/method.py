"""Sparse Variational Dropout's :class:`~bayesprune.methods.base.Method`."""

import pyro
import pyro.optim
from pyro.optim import PyroLRScheduler

from bayesprune.core.checkpoint import load_module_state
from bayesprune.core.errors import ConfigError
from bayesprune.core.loop import svi_step
from bayesprune.core.tasks import mean_loss
from bayesprune.methods import register_method
from bayesprune.methods.base import Method
from bayesprune.methods.context import fit_one_after_another
from bayesprune.methods.metrics import FRACTION, NONNEGATIVE, NUMBER, table_of
from bayesprune.methods.sparse_vd.fit import build_model, build_optimizer
from bayesprune.methods.sparse_vd.fitted import SparseVDFitted
from bayesprune.methods.sparse_vd.model import (
    KLAnnealing,
    SparseVDELBO,
    SparseVDGuide,
    weight_sites,
)
from bayesprune.methods.sparse_vd.options import SparseVDOptions
from bayesprune.methods.sparse_vd.together import fit_together


@register_method
class SparseVD(Method):
    """Sparse Variational Dropout: per-weight dropout rates α under a log-uniform prior; prune log α > 3."""

    name = "sparse-vd"
    Options = SparseVDOptions
    quick = ("sparse-vd.kl_anneal_start=0", "sparse-vd.kl_anneal_end=1")
    metrics_keys = {
        "log_alpha_threshold": NUMBER,
        "fraction_removed_by_threshold": FRACTION,
        "compression_by_threshold": NONNEGATIVE,
        "layer_fraction_removed": table_of(FRACTION, "fractions of a layer's weights removed"),
    }
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
        if options.pretrain_epochs:
            ctx.train_network("pretrain", net, batches, epochs=options.pretrain_epochs, loss=mean_loss(data.task))
        model = build_model(net, data, noise_scale=ctx.noise_scale).to(device)
        guide = SparseVDGuide(model, init_log_sigma2=options.init_log_sigma2).to(device)
        annealing = KLAnnealing(start=options.kl_anneal_start, end=options.kl_anneal_end)
        objective = SparseVDELBO(annealing=annealing, train_clip=options.train_clip, threshold=options.threshold)
        optim = build_optimizer(options, ctx.optim, epochs=ctx.epochs)
        step = svi_step(model, guide, objective=objective, optim=optim)
        with pyro.validation_enabled(False):  # argument checks cost much per step; the options were validated
            history = ctx.train(
                "svi",
                step,
                batches,
                epochs=ctx.epochs,
                state={"model": model, "guide": guide, "optimizer": optim},
                scheduler=optim if isinstance(optim, PyroLRScheduler) else None,
                callbacks=[annealing],
                validate=SparseVDFitted(model, guide, threshold=options.threshold).predict,
            )
        return SparseVDFitted(
            model,
            guide,
            threshold=options.threshold,
            history=history,
            predictive_samples=options.predictive_samples,
            ctx=ctx,
        )

    fits_together = True

    def fit_together(self, nets, datasets, options, contexts):
        """:meth:`fit` of several seeds' fits trained as one stack (:func:`.together.fit_together`), or one
        after another where the stack does not hold them (networks other than plain MLPs)."""
        fits = fit_together(nets, datasets, options, contexts)
        return fits if fits is not None else fit_one_after_another(self, nets, datasets, options, contexts)

    def restore(self, net, data, options, ctx, state):
        model = build_model(net, data, noise_scale=ctx.noise_scale)
        guide = SparseVDGuide(model, init_log_sigma2=options.init_log_sigma2)
        load_module_state(model, state["model"])
        load_module_state(guide, state["guide"])
        return SparseVDFitted(
            model, guide, threshold=options.threshold, predictive_samples=options.predictive_samples, ctx=ctx
        )

    def inference_data(self, fits, data, *, seed):
        """θ, log σ² and log α of the chains and weight draws of q (:func:`.inference_data.to_inference_data`),
        with as many predictive draws as the Monte-Carlo predictive makes (20 where it makes none)."""
        from bayesprune.methods.sparse_vd.inference_data import to_inference_data

        return to_inference_data(fits, data, seed=seed, num_predictive_draws=fits[0].predictive_samples or 20)

    def report_sections(self, run_dir, metrics):
        """The fraction of weights log α > threshold removes, per layer, and the histogram of log α."""
        from bayesprune.methods.sparse_vd.report import report_sections

        return report_sections(run_dir, metrics)
