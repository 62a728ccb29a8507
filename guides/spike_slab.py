"""Mean-field Gaussian × Bernoulli guide of the sparse BNN (paper 003, eq. 3.3 and Algorithm 1)."""
import math

import pyro
import torch
import torch.nn.functional as F
from pyro.nn import PyroModule, PyroParam

from bayesprune.distributions import SpikeSlabPosterior, inclusion_logits


def _inverse_softplus(x: float) -> float:
    return x + math.log(-math.expm1(-x))


class SpikeSlabGuide(PyroModule):
    r"""q(W) = N(m, σ²) with σ = softplus(ρ), and q(Z) = Bernoulli(p*(m, σ)) for every site of a model.

    The inclusion probability is not a free parameter: each call sets it to its closed-form optimum
    p*(m, σ) (eq. 3.8), which is step 9 of Algorithm 1 (the coordinate-descent update of p). It is
    detached, so the gradient step on (m, ρ) sees p as fixed, as in the paper; by the envelope
    theorem that gradient equals the gradient of the collapsed objective min_p J(θ, p).

    All means and all ρ live in two flat vectors, so optimiser steps and the closed-form update are
    vectorised over the whole network; each site reads a view.

    Args:
        model: a :class:`bayesprune.models.BayesianNetwork`; its current parameters initialise m.
        init_scale: initial σ of every weight.
    """

    def __init__(self, model, *, init_scale: float = 1e-2):
        super().__init__()
        self._site_priors = model.site_priors
        self.site_shapes = dict(model.site_shapes)
        params = list(model.net.parameters())
        self.loc = PyroParam(torch.cat([p.detach().flatten() for p in params]))
        self.rho = PyroParam(torch.full_like(self.loc, _inverse_softplus(init_scale)))

    @property
    def num_weights(self) -> int:
        return sum(shape.numel() for shape in self.site_shapes.values())

    def _split(self, flat: torch.Tensor) -> dict:
        sizes = [shape.numel() for shape in self.site_shapes.values()]
        return {
            name: chunk.view(shape)
            for (name, shape), chunk in zip(self.site_shapes.items(), torch.split(flat, sizes))
        }

    def posteriors(self) -> dict:
        """The variational distribution of every site, with p at its optimum p*(m, σ)."""
        locs, scales = self._split(self.loc), self._split(F.softplus(self.rho))
        priors = self._site_priors(self.loc.device)
        posteriors = {}
        for name, prior in priors.items():
            base = prior.base_dist
            loc, scale = locs[name], scales[name]
            logits = inclusion_logits(loc.detach(), scale.detach(), base.pi, base.tau0, base.tau1)
            posteriors[name] = SpikeSlabPosterior(loc, scale, logits)
        return posteriors

    def forward(self, *args, **kwargs):
        for name, posterior in self.posteriors().items():
            pyro.sample(name, posterior.to_event(len(posterior.batch_shape)))

    @torch.no_grad()
    def inclusion_probabilities(self) -> dict:
        """p*(m, σ) of every weight, keyed by site name."""
        return {name: q.probs for name, q in self.posteriors().items()}

    @torch.no_grad()
    def mean_params(self) -> dict:
        """The posterior-mean network: m for every site."""
        return {name: loc.clone() for name, loc in self._split(self.loc).items()}

    @torch.no_grad()
    def sample_params(self) -> dict:
        """One draw W ~ q(W) for every site."""
        return {name: q.rsample() for name, q in self.posteriors().items()}
