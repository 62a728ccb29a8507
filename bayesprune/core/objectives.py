"""Variational objectives as ``pyro.infer.ELBO`` subclasses.

:class:`AnalyticKLELBO` scores only the observed sites by Monte Carlo and adds the exact KL of every
latent site, read from the distributions' registered KLs. With the spike-and-slab pair of
:mod:`bayesprune.core.distributions` it is the sBNN objective J(θ, p) = −E_q log p(D | W) + Σ R(θ_i, p_i)
of paper 003 (eqs. 3.6–3.7), up to the constant −1/2 per weight.

Latent sites are not scored by log-density at all (unlike Pyro's ``TraceMeanField_ELBO``, which still
evaluates both traces' weight-sized log-densities), which is what keeps an SVI step close to a
hand-written PyTorch step.
"""

import torch
from pyro import poutine
from pyro.infer import ELBO
from pyro.poutine.util import site_is_subsample
from torch.distributions import Independent, kl_divergence

from bayesprune.core.reparameterization import LocalReparameterization


def site_kl(q, p) -> torch.Tensor:
    """Σ KL(q ‖ p) over one latent site (0-dim): the site's share of its posterior's fused network-wide
    evaluation where it has one (:class:`bayesprune.core.fused.FlatSite`), else the registered KL summed."""
    base_q, base_p = (d.base_dist if isinstance(d, Independent) else d for d in (q, p))
    fused = getattr(base_q, "summed_kl", None)
    kl = fused(base_p) if fused is not None else None
    if kl is None:
        kl = kl_divergence(q, p)
        if kl.dim():
            kl = kl.sum()
    return kl


def latent_sites(trace):
    """(name, site) of every latent sample site of a Pyro trace: sampled, not observed, not a subsample."""
    for name, site in trace.nodes.items():
        if site["type"] == "sample" and not site["is_observed"] and not site_is_subsample(site):
            yield name, site


class AnalyticKLELBO(ELBO):
    """Negative ELBO −E_q[log p(D | W)] + Σ_sites scale · KL(q_site ‖ p_site).

    Each latent site's KL is multiplied by the site's ``scale`` (see
    :class:`bayesprune.core.penalties.PenaltyScale` for the minibatch penalty weights of paper 003, eqs. 4.2–4.3).

    Args:
        num_particles: Monte-Carlo draws of W per step.
        local_reparameterization: sample pre-activations of ``linear`` layers instead of weights
            (convolutions are refused) (:class:`bayesprune.core.reparameterization.LocalReparameterization`).
    """

    def __init__(self, *, num_particles: int = 1, local_reparameterization: bool = False):
        super().__init__(num_particles=num_particles)
        self.local_reparameterization = local_reparameterization

    def combine(self, nll: torch.Tensor, kl: torch.Tensor) -> torch.Tensor:
        """How the expected negative log-likelihood and the KL form the loss; the hook subclasses override."""
        return nll + kl

    def _get_trace(self, model, guide, args, kwargs):
        guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
        replayed = poutine.replay(model, trace=guide_trace)
        if self.local_reparameterization:
            posteriors = {id(site["value"]): site["fn"].base_dist for _, site in latent_sites(guide_trace)}
            with LocalReparameterization(posteriors):
                model_trace = poutine.trace(replayed).get_trace(*args, **kwargs)
        else:
            model_trace = poutine.trace(replayed).get_trace(*args, **kwargs)
        return model_trace, guide_trace

    def _particle(self, model, guide, args, kwargs):
        model_trace, guide_trace = self._get_trace(model, guide, args, kwargs)
        nll = 0.0
        for site in model_trace.nodes.values():
            if site["type"] == "sample" and site["is_observed"]:
                nll = nll - (site["fn"].log_prob(site["value"]) * site["scale"]).sum()
        kl = 0.0
        for name, site in latent_sites(guide_trace):
            summed = site_kl(site["fn"], model_trace.nodes[name]["fn"])
            # A scale of exactly 1 (no penalty weight, no plate) multiplies nothing: one node less per site.
            scale = site["scale"]
            kl = kl + (summed if isinstance(scale, (int, float)) and scale == 1 else summed * scale)
        return nll, kl

    def differentiable_loss(self, model, guide, *args, **kwargs):
        nll, kl = 0.0, 0.0
        for _ in range(self.num_particles):
            particle_nll, particle_kl = self._particle(model, guide, args, kwargs)
            nll, kl = nll + particle_nll, kl + particle_kl
        return self.combine(nll / self.num_particles, kl / self.num_particles)

    def loss(self, model, guide, *args, **kwargs):
        with torch.no_grad():
            return self.differentiable_loss(model, guide, *args, **kwargs).item()

    def loss_and_grads(self, model, guide, *args, **kwargs):
        """The loss, with its gradients accumulated; a detached tensor, so a CUDA step does not wait
        for the host (``pyro.infer.SVI.step`` reads it back with ``.item()``)."""
        loss = self.differentiable_loss(model, guide, *args, **kwargs)
        loss.backward()
        return loss.detach()


OBJECTIVES = {"analytic-kl": AnalyticKLELBO}
