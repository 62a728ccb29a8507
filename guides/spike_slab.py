"""Mean-field Gaussian × Bernoulli guide of the sparse BNN (paper 003, eq. 3.3 and Algorithm 1)."""

import torch

from bayesprune.core.distributions import SpikeAndSlab, SpikeSlabPosterior, SpikeSlabPosteriors, inclusion_logits
from bayesprune.core.fused import softplus
from bayesprune.core.group_spike_slab import GroupSpikeAndSlab, GroupSpikeSlabPosterior, group_inclusion_logits
from bayesprune.guides.horseshoe_scales import HorseshoeScales, horseshoe_sites
from bayesprune.guides.mean_field import MeanFieldGuide


class SpikeSlabGuide(MeanFieldGuide):
    r"""q(W) = N(m, σ²) with σ = softplus(ρ), and q(Z) = Bernoulli(p*(m, σ)) for every site of a model.

    The inclusion probability is not a free parameter: each call sets it to its closed-form optimum
    p*(m, σ) (eq. 3.8), which is step 9 of Algorithm 1 (the coordinate-descent update of p). It is
    detached, so the gradient step on (m, ρ) sees p as fixed, as in the paper; by the envelope
    theorem that gradient equals the gradient of the collapsed objective min_p J(θ, p).

    All means and all ρ live in two flat vectors (:class:`~bayesprune.guides.mean_field.MeanFieldGuide`),
    so optimiser steps and the closed-form update are vectorised over the whole network.

    Args:
        model: a :class:`bayesprune.models.BayesianNetwork`; its current parameters initialise m.
        init_scale: initial σ of every weight.
    """

    def __init__(self, model, *, init_scale: float = 1e-2):
        super().__init__(model, init_scale=init_scale)
        self._site_priors = model.site_priors
        self._shared = {}
        horseshoe = horseshoe_sites(model.site_priors())  # the scale variables of the sites under a group horseshoe
        self.horseshoe = HorseshoeScales(horseshoe) if horseshoe else None

    def _horseshoe_posteriors(self, locs: dict, scales: dict) -> dict:
        return {} if self.horseshoe is None else self.horseshoe.posteriors(locs, scales)

    def _shared_constants(self, priors: dict):
        """The prior constants of every site if all sites share one 0-dim spike-and-slab prior, else
        ``None``; decided once per set of priors (the model builds them once per device)."""
        key = tuple(id(prior) for prior in priors.values())
        if key not in self._shared:
            bases = [prior.base_dist for prior in priors.values()]
            first = bases[0] if bases else None
            shared = all(
                type(base) is SpikeAndSlab
                and all(
                    value.dim() == 0 and (_same_memory(value, first_value) or torch.equal(value, first_value))
                    for value, first_value in zip(base.hyperparameters, first.hyperparameters)
                )
                for base in bases
            ) and list(priors) == list(self.site_shapes)
            self._shared[key] = (first.constants, bases) if shared and bases else None  # bases keep the ids valid
        return self._shared[key]

    def posteriors(self) -> dict:
        """The variational distribution of every site, with p at its optimum p*(m, σ) (eq. 3.8), or one p* per
        unit for a site of a :class:`~bayesprune.models.priors.GroupSpikeSlabPrior`
        (:func:`~bayesprune.core.group_spike_slab.group_inclusion_logits`), or q(W) q(a) q(b) for a site of a
        :class:`~bayesprune.models.priors.GroupHorseshoePrior` (:class:`~bayesprune.guides.horseshoe_scales.HorseshoeScales`)."""
        priors = self._site_priors(self.loc.device)
        shared = self._shared_constants(priors)
        if shared is not None:  # one network-wide posterior: p* and the KL fused over the flat vectors
            constants, bases = shared
            return SpikeSlabPosteriors(self.loc, softplus(self.rho), self.site_shapes, bases, constants).sites
        locs, scales = self._locs_and_scales()
        horseshoe, posteriors = self._horseshoe_posteriors(locs, scales), {}
        for name, prior in priors.items():
            if name in horseshoe:
                posteriors[name] = horseshoe[name]
                continue
            base = prior.base_dist
            loc, scale = locs[name], scales[name]
            if isinstance(base, GroupSpikeAndSlab):  # one p* per unit
                logits = group_inclusion_logits(loc.detach(), scale.detach(), *base.hyperparameters)
                posteriors[name] = GroupSpikeSlabPosterior(loc, scale, logits)
            else:
                logits = inclusion_logits(loc.detach(), scale.detach(), *base.hyperparameters, constants=base.constants)
                posteriors[name] = SpikeSlabPosterior(loc, scale, logits)
        return posteriors

    @torch.no_grad()
    def sample_params(self) -> dict:
        """One draw W ~ q(W) for every site (:meth:`sampler`)."""
        return self.sampler()()

    @torch.no_grad()
    def sampler(self):
        """A function making one draw W ~ q(W) for every site at each call, while m and ρ stay as they
        are. Where one network-wide posterior draws them all (priors shared), m + σ ε from one ``randn``
        over the flat vectors, the draw that posterior makes, without the KL it computes beside it (the
        predictive and ArviZ's draws need none), and σ = softplus(ρ) computed once for all the draws:
        on a resnet18 it cost as much as a draw's forward pass over 360 test images."""
        if self._shared_constants(self._site_priors(self.loc.device)) is None:
            return super().sample_params  # a draw from each site's posterior (not this class's, which calls here)
        loc, scale = self.loc.detach(), softplus(self.rho.detach())
        return lambda: self._split(torch.addcmul(loc, scale, torch.randn_like(loc)))

    @torch.no_grad()
    def inclusion_probabilities(self) -> dict:
        """p*(m, σ) of every weight, keyed by site name."""
        return {name: q.probs for name, q in self.posteriors().items()}

    @torch.no_grad()
    def inclusion_logits(self) -> dict:
        """B − A of eq. 3.8 of every weight in float64, keyed by site name: the ranking that p* carries
        before it rounds to exactly 1 in float32 (from B − A ≈ 17 on, most weights of a trained net)."""
        locs, scales = self._locs_and_scales()
        horseshoe, logits = self._horseshoe_posteriors(locs, scales), {}
        for name, prior in self._site_priors(self.loc.device).items():
            base = prior.base_dist
            if name in horseshoe:  # every weight of a unit ranked as its unit: 2 E_q[log z_g s]
                logits[name] = horseshoe[name].unit_logits().double().expand_as(locs[name]).contiguous()
                continue
            loc, scale = locs[name].double(), scales[name].double()
            pi, tau0, tau1 = (value.double() for value in base.hyperparameters)
            if isinstance(base, GroupSpikeAndSlab):  # every weight of a unit ranked as its unit
                logits[name] = group_inclusion_logits(loc, scale, pi, tau0, tau1).expand_as(loc).contiguous()
            else:
                logits[name] = inclusion_logits(loc, scale, pi, tau0, tau1)
        return logits


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two 0-dim tensors read the same element (views of one constant, as
    :class:`~bayesprune.models.priors.SpikeSlabPrior` shares among sites): equal without reading the device."""
    return a.dtype == b.dtype and a.device == b.device and a.data_ptr() == b.data_ptr()
