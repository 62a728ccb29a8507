"""The spike-and-slab posterior fitted by SVI from one or several starts, and the start kept."""

import copy
import math

import pyro
import torch
from pyro.optim import PyroLRScheduler
from torch import nn

from bayesprune.core.loop import svi_step
from bayesprune.core.objectives import OBJECTIVES
from bayesprune.core.optim import build_optim
from bayesprune.core.penalties import PENALTIES
from bayesprune.core.predict import metric
from bayesprune.core.validation import require
from bayesprune.guides import SpikeSlabGuide
from bayesprune.methods.sbnn.fitted import SBNNFitted
from bayesprune.methods.sbnn.options import SBNNOptions
from bayesprune.models import LIKELIHOODS, BayesianNetwork
from bayesprune.models.module_priors import module_priors

#: Draws of W in the ELBO that chooses among several starts (``sbnn.keep = "elbo"``).
ELBO_DRAWS = 32


def build_model(net, data, prior, *, noise_scale=None, sites=None) -> BayesianNetwork:
    """The Bayesian network around ``net``: ``prior`` on its ``sites`` (the parameters of its Linear and
    convolution layers by default) and the likelihood of the data's task (Gaussian noise of scale
    ``noise_scale`` for regression, learned when ``None``)."""
    options = {"scale": noise_scale} if data.task == "regression" else {}
    return BayesianNetwork(net, prior, LIKELIHOODS[data.task](data.num_train, **options), sites=sites)


def site_prior(net, options: SBNNOptions, ctx):
    """The prior of every site: ``[sbnn]``'s spike-and-slab, or a table's of ``[[model.priors]]`` where one
    claims the site (:func:`bayesprune.models.module_priors.module_priors`)."""
    return module_priors(net, options.prior(), ctx.priors, ctx.sites(net))


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
        site_prior(net, options, ctx) if prior is None else prior,
        noise_scale=ctx.noise_scale,
        sites=ctx.sites(net),
    ).to(device)
    guide = guide_class(model, init_scale=options.init_scale).to(device)
    objective = OBJECTIVES[options.objective](
        num_particles=options.num_particles,
        local_reparameterization=options.local_reparameterization,
    )
    optim = build_optim(ctx.optim, epochs=ctx.epochs)
    step = svi_step(model, guide, objective=objective, optim=optim, penalty=PENALTIES[options.penalty]())
    with pyro.validation_enabled(False):  # argument checks cost ~10x per step; the config was validated
        history = ctx.train(
            stage,
            step,
            ctx.batches(data.x_train, data.y_train),
            epochs=ctx.epochs,
            state={"model": model, "guide": guide, "optimizer": optim},
            scheduler=optim if isinstance(optim, PyroLRScheduler) else None,
            validate=SBNNFitted(model, guide).predict,
        )
    return trained_fit(model, guide, history, options, ctx)


def trained_fit(model, guide, history, options: SBNNOptions, ctx) -> SBNNFitted:
    """The :class:`SBNNFitted` of a model and guide trained by ``ctx`` (alone or in a stack of fits), with
    ``options``' score and predictive draws."""
    return SBNNFitted(
        model,
        guide,
        score=options.score,
        best_epoch=ctx.best_epoch,
        history=history,
        predictive_samples=options.predictive_samples,
        ctx=ctx,
    )


def initial_means(net, options: SBNNOptions, sites) -> nn.Module:
    """The network q's means start from (``sbnn.init``): ``net`` itself (``"network"``), or a copy whose every
    weight tensor among ``sites`` of two or more dimensions is rescaled to the standard deviation
    sqrt(2 / fan-in) of He et al. (2015, eq. 10), fan-in the inputs of one output unit (``"fan-in"``): the
    draw's signs and proportions kept, its biases and a tensor of zeros left as they are."""
    if options.init == "network":
        return net
    start = copy.deepcopy(net)
    with torch.no_grad():
        for name, param in start.named_parameters():
            spread = param.std() if name in sites and param.dim() >= 2 and param.numel() > 1 else 0
            if spread > 0:
                param.mul_(math.sqrt(2 / param[0].numel()) / spread)
    return start


def fit_starts(net, data, options: SBNNOptions, ctx, stage: str = "svi") -> list:
    """One fit of ``options`` per factor of ``options.starts``, from the weights and biases of ``net``'s
    :func:`initial_means` multiplied by it (each in a stage of its own, the first ``stage``, the others
    ``"<stage> from start x<factor>"``, all from ``ctx.seed``)."""
    fits, net = [], initial_means(net, options, ctx.sites(net))
    for index, factor in enumerate(options.starts):
        start = copy.deepcopy(net)
        with torch.no_grad():
            for param in start.parameters():
                param.mul_(factor)
        name = stage if index == 0 else f"{stage} from start x{factor:g}"
        fits.append(fit_posterior(start, data, options, ctx, stage=name))
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
    ctx.best_epoch = kept.best_epoch
    return SBNNFitted(
        kept.model,
        kept.guide,
        score=kept.score,
        starts=[
            {"start": factor, options.keep: score, "kept": index == best}
            for index, (factor, score) in enumerate(zip(options.starts, scores))
        ],
        best_epoch=kept.best_epoch,
        history=kept.history,
        predictive_samples=kept.predictive_samples,
        ctx=ctx,
    )
