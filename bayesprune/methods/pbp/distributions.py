"""PAC-Bayes pruning's spike-and-slab with a point mass at zero (paper 000, eq. 5) and its KL.

:class:`DiracSpikeSlab` is the prior and the posterior of PBP, with its registered KL of appendix B.4;
:class:`DiracSpikeSlabPosteriors` holds one network's sites in flat vectors and evaluates the KL of all
of them in one fused kernel (:mod:`bayesprune.core.fused`).
"""

import functools
from typing import NamedTuple

import torch
from pyro.distributions import TorchDistribution
from torch.distributions import constraints
from torch.distributions.kl import register_kl
from torch.distributions.utils import broadcast_all

from bayesprune.core.distributions import finite, normal_log_prob, positive_finite
from bayesprune.core.estimators import relaxed_bernoulli
from bayesprune.core.fused import FlatPosterior, FlatSite, log1p
from bayesprune.methods.pbp.bounds import kl_bernoulli


class DiracSpikeSlab(FlatSite, TorchDistribution):
    r"""(1 − λ)·δ₀ + λ·N(μ, σ²): a weight pruned with probability 1 − λ, else Gaussian (paper 000, eq. 5).

    ``sample`` draws it exactly, b·w with b ~ Bernoulli(λ) and w ~ N(μ, σ²). ``rsample`` draws the
    relaxation the gradients of PBP flow through (appendix B.3): the Concrete(λ, 1 − λ) variable of
    temperature β in place of b. ``log_prob`` is the density with respect to δ₀ + Lebesgue measure
    (log(1 − λ) at 0, log λ + log N(w; μ, σ²) elsewhere), the measure the KL of appendix B.4 is taken in.

    Args:
        probs: keep-probability λ in [0, 1] (1 for a parameter that is never pruned, such as a bias).
        loc: slab mean μ.
        scale: slab standard deviation σ > 0.
        temperature: β of the relaxation ``rsample`` draws (0.5 in the paper).
    """

    arg_constraints = {"probs": constraints.unit_interval, "loc": finite, "scale": positive_finite}
    support = constraints.real
    has_rsample = True

    def __init__(self, probs, loc, scale, *, temperature: float = 0.5, validate_args=None):
        self.probs, self.loc, self.scale = broadcast_all(probs, loc, scale)
        self.temperature = temperature
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(DiracSpikeSlab, _instance)
        batch_shape = torch.Size(batch_shape)
        new.probs, new.loc, new.scale = (value.expand(batch_shape) for value in (self.probs, self.loc, self.scale))
        new.temperature = self.temperature
        super(DiracSpikeSlab, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return self.probs * self.loc

    @property
    def variance(self):
        return self.probs * (self.scale**2 + self.loc**2) - self.mean**2

    def _slab(self, shape):
        return self.loc + self.scale * torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)

    def sample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        with torch.no_grad():
            return torch.bernoulli(self.probs.expand(shape)) * self._slab(shape)

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        logits = torch.logit(self.probs, eps=1e-6).expand(shape)
        return relaxed_bernoulli(logits, self.temperature) * self._slab(shape)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        slab = torch.log(self.probs) + normal_log_prob(value - self.loc, self.scale)
        return torch.where(value == 0, torch.log1p(-self.probs), slab)


@register_kl(DiracSpikeSlab, DiracSpikeSlab)
def _kl_dirac_spike_slab(q, p):
    """KL(q ‖ p) = kl(λ ‖ λ⁰) + λ·KL(N(μ, σ²) ‖ N(μ⁰, σ⁰²)) (paper 000, appendix B.4), the squared mean
    difference over the *prior* variance (the main text's (σ^f)² in its denominator is a typo); a
    weight kept surely by both (λ = λ⁰ = 1) contributes its Gaussian KL alone."""
    ratio = (q.scale / p.scale) ** 2
    gaussian = 0.5 * ((q.loc - p.loc) ** 2 / p.scale**2 + ratio - torch.log(ratio) - 1)
    return kl_bernoulli(q.probs, p.probs) + q.probs * gaussian


def _kl_bernoulli_vectorised(q, p):
    """:func:`~bayesprune.methods.pbp.bounds.kl_bernoulli` with :func:`bayesprune.core.fused.log1p` in place of
    ``xlog1py`` (scalar code on CPU), to within a few ulps of it."""
    first = (q * log1p((q - p) / p)).masked_fill_(q == 0, 0.0)
    second = ((1 - q) * log1p((p - q) / (1 - p))).masked_fill_(q == 1, 0.0)
    return first.add_(second).masked_fill_((q == p) & (p * (1 - p) == 0), 0.0)


class FlatDiracSpikeSlabPrior(NamedTuple):
    """λ⁰, μ⁰ and 1/σ⁰² of every parameter of a network in flat vectors (site order), detached, and the
    per-site priors they were read from (a posterior's fused KL covers exactly these)."""

    probs: torch.Tensor
    loc: torch.Tensor
    precision: torch.Tensor
    sites: tuple

    @classmethod
    def of(cls, priors: list):
        with torch.no_grad():
            flat = [
                torch.cat([getattr(prior, key).detach().flatten() for prior in priors])
                for key in ("probs", "loc", "scale")
            ]
        return cls(flat[0], flat[1], flat[2].square().reciprocal(), tuple(priors))


class DiracSpikeSlabPosteriors(FlatPosterior):
    r"""The sites of one network-wide PBP posterior: flat λ, μ and σ, one :class:`DiracSpikeSlab` per
    site whose parameters are views of them.

    The KL of every site to its :class:`DiracSpikeSlab` prior (appendix B.4, as
    :func:`_kl_dirac_spike_slab`) comes from one fused evaluation of the formula and its gradient
    over the flat vectors (:meth:`kl_terms`, :func:`bayesprune.core.fused.summed_kl`).

    Args:
        probs, loc, scale: flat λ (1 for a parameter never pruned), μ and σ of every parameter, in site order.
        shapes: site name → shape, in the order of the flat vectors.
        prior: the priors of the same sites, flat (:class:`FlatDiracSpikeSlabPrior`).
        temperature: β of every site's relaxation.
    """

    def __init__(self, probs, loc, scale, shapes: dict, prior: FlatDiracSpikeSlabPrior, *, temperature: float):
        super().__init__(shapes, prior.sites)
        self.probs, self.loc, self.scale, self.prior = probs, loc, scale, prior
        self.make_sites(functools.partial(DiracSpikeSlab, temperature=temperature), probs, loc, scale)

    def kl_terms(self) -> tuple:
        """:func:`_dirac_spike_slab_kl_terms` of the flat λ, μ and σ, with the derivatives the step needs."""
        prior = self.prior
        return (
            _dirac_spike_slab_kl_terms,
            (self.probs, self.loc, self.scale),
            dict(
                prior_probs=prior.probs,
                prior_loc=prior.loc,
                prior_precision=prior.precision,
                needs=tuple(x.requires_grad for x in (self.probs, self.loc, self.scale)),
            ),
        )


def _dirac_spike_slab_kl_terms(probs, loc, scale, *, prior_probs, prior_loc, prior_precision, needs):
    r"""kl(λ ‖ λ⁰) + λ·G per parameter, G = ((μ − μ⁰)²/σ⁰² + r − log r − 1)/2 with r = σ²/σ⁰², and its
    gradient in the inputs ``needs`` flags: ∂/∂λ = log(λ/λ⁰) − log((1 − λ)/(1 − λ⁰)) + G (0 where
    λ = λ⁰ ∈ {0, 1}, as the value), ∂/∂μ = λ(μ − μ⁰)/σ⁰², ∂/∂σ = λ(σ/σ⁰² − 1/σ)."""
    difference = loc - prior_loc
    ratio = scale.square().mul_(prior_precision)
    gaussian = difference.square().mul_(prior_precision).add_(ratio).sub_(ratio.log()).sub_(1).mul_(0.5)
    value = _kl_bernoulli_vectorised(probs, prior_probs).add_(probs * gaussian)
    grads = [None, None, None]
    if needs[0]:
        both_ends = (probs == prior_probs) & (prior_probs * (1 - prior_probs) == 0)
        slope = (
            (probs / prior_probs).log_().sub_(((1 - probs) / (1 - prior_probs)).log_())
        )  # log1p is scalar code on CPU
        grads[0] = slope.masked_fill_(both_ends, 0.0).add_(gaussian)
    if needs[1]:
        grads[1] = difference.mul_(prior_precision).mul_(probs)
    if needs[2]:
        grads[2] = (scale * prior_precision).sub_(scale.reciprocal()).mul_(probs)
    return value, tuple(grads)
