"""The model and guide of PBP's stochastic stages (eq. 5) and one stage of SVI on them."""

import math

import torch
from pyro.optim import PyroLRScheduler

from bayesprune.core.criteria import weight_sites
from bayesprune.core.loop import svi_step
from bayesprune.core.optim import build_optim
from bayesprune.methods.pbp.distributions import DiracSpikeSlab
from bayesprune.methods.pbp.guide import DiracSpikeSlabGuide
from bayesprune.models import BayesianNetwork, BoundedCategorical
from bayesprune.models.priors import GivenPrior


def prior_distributions(guide) -> dict:
    """The stage-2 guide's distributions, detached: the data-dependent prior P of stage 3."""
    with torch.no_grad():
        return {
            name: DiracSpikeSlab(q.probs.detach().clone(), q.loc.detach().clone(), q.scale.detach().clone())
            for name, q in guide.posteriors().items()
        }


def model_and_guide(net, priors: dict, likelihood, options, *, learn_scale: bool) -> tuple:
    """The network under ``priors`` observed through ``likelihood``, and the guide started at the prior:
    λ and μ of every site set to the prior's (``net``'s parameters are overwritten with μ), σ to σ⁰. The
    sites are ``priors``' keys; other parameters (normalisation layers) are point estimates."""
    with torch.no_grad():
        for name, param in net.named_parameters():
            if name in priors:
                param.copy_(priors[name].loc)
    model = BayesianNetwork(net, GivenPrior(priors), likelihood, sites=list(priors))
    keep = {name: priors[name].probs for name in weight_sites(net) if name in priors}
    guide = DiracSpikeSlabGuide(
        model,
        keep,
        scale=math.exp(options.log_sigma2 / 2),
        learn_scale=learn_scale,
        parameterization=options.parameterization,
        temperature=options.temperature,
    )
    return model, guide


def variational_stage(ctx, name: str, model, guide, batches, *, objective, epochs: int):
    """A stage of SVI on ``objective`` with the run's optimiser and schedule."""
    optim = build_optim(ctx.optim, epochs=epochs)
    step = svi_step(model, guide, objective=objective, optim=optim)
    return ctx.train(
        name,
        step,
        batches,
        epochs=epochs,
        state={"guide": guide, "optimizer": optim},
        scheduler=optim if isinstance(optim, PyroLRScheduler) else None,
    )


def posterior(net, priors: dict, *, n: int, options) -> tuple:
    """Stage 3's model (prior P, bounded cross-entropy on the n examples of S \\ S_P) and Q started at P."""
    return model_and_guide(
        net, priors, BoundedCategorical(n, min_prob=options.min_prob), options, learn_scale=options.learn_scale
    )


def start_distributions(net, keep: dict, options, sites) -> dict:
    """The start of stage 2, site → (1 − λ⁰)δ₀ + λ⁰N(W⁰, σ⁰²) (eq. 5): λ⁰ of ``keep`` (1 where it has none,
    the biases), W⁰ the network's weights, σ⁰² = exp(``log_sigma2``)."""
    params = dict(net.named_parameters())
    return {
        name: DiracSpikeSlab(
            keep[name] if name in keep else torch.ones_like(params[name]),
            params[name].detach().clone(),
            torch.full_like(params[name], math.exp(options.log_sigma2 / 2)),
        )
        for name in sites
    }
