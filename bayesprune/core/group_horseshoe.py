r"""The group horseshoe prior on units (Louizos, Ullrich, Welling 2017, "Bayesian Compression for Deep
Learning", section 3.2) and its mean-field partner, with their KL in closed form.

Every row g of a site along its first dimension (a Linear layer's output unit, a convolution's output
channel) has a scale z_g ~ C+(0, 1), the site (layer) a global scale s ~ C+(0, τ0), and

    w_gj | z_g, s ~ N(0, z_g² s²).

Each half-Cauchy is written, as in the paper, as the square root of a product of a Gamma and an inverse
Gamma variable: z_g = √(a_g b_g), a_g ~ Gamma(½, rate 1), b_g ~ InvGamma(½, 1); s = √(a b), a ~ Gamma(½,
rate 1/τ0²), b ~ InvGamma(½, 1) (rate 1/τ0²: checked against the half-Cauchy's quantiles by the tests).

The variational family: q(w) = N(m, σ²) per weight and a log-normal q for every a and b, all independent.
The paper's q(w | z) = N(z μ, z² σ²) couples each weight to its unit's scale; here q(W) is independent of
the scales (a deviation, so that the family shares the sBNN guide's flat N(m, σ²)), and the KL is then
exact in closed form, with no draw of a scale:

    KL = Σ_gj E_q[KL(N(m, σ²) ‖ N(0, z_g² s²))] + Σ_g [KL(q(a_g) ‖ Gamma) + KL(q(b_g) ‖ InvGamma)] + (same for s),
    E_q[KL(N(m, σ²) ‖ N(0, z² s²))] = E[log z s] − log σ + (m² + σ²)/2 · E[1/(z² s²)] − ½,

with E[log z] = (μ_a + μ_b)/2 and E[1/z²] = exp(−μ_a + σ_a²/2 − μ_b + σ_b²/2) for log a ~ N(μ_a, σ_a²),
log b ~ N(μ_b, σ_b²). A unit's inclusion logit is 2 E_q[log z_g s], the logit of 1 − κ_g with κ_g =
1/(1 + z_g² s²) the horseshoe's shrinkage factor at the median scales (Carvalho, Polson, Scott 2010 read
1 − κ as the analogue of an inclusion probability); units rank by it.

As the other site priors, both distributions keep the site's shape as batch shape and spread a row's
terms (and the global terms) evenly over its elements, so that their sum over the site is exact.
"""

import math

import torch
from pyro.distributions import TorchDistribution
from torch.distributions import constraints
from torch.distributions.kl import register_kl

from bayesprune.core.distributions import SpikeSlabPosterior, positive_finite
from bayesprune.core.group_spike_slab import _spread, whole_site_expand

_HALF_LOG_TWO_PI = 0.5 * math.log(2 * math.pi)
_LGAMMA_HALF = math.lgamma(0.5)


def _row_shape(shape) -> tuple:
    return (shape[0],) + (1,) * (len(shape) - 1) if len(shape) else ()


def kl_lognormal_gamma(loc, scale, rate):
    """KL(LogNormal(loc, scale²) ‖ Gamma(½, rate)) elementwise: −H(q) − E_q log Gamma(x; ½, rate)."""
    entropy = loc + 0.5 + scale.log() + _HALF_LOG_TWO_PI
    expected = 0.5 * torch.log(rate) - _LGAMMA_HALF - 0.5 * loc - rate * torch.exp(loc + 0.5 * scale**2)
    return -entropy - expected


def kl_lognormal_inverse_gamma(loc, scale):
    """KL(LogNormal(loc, scale²) ‖ InvGamma(½, 1)) elementwise: −H(q) − E_q log InvGamma(x; ½, 1)."""
    entropy = loc + 0.5 + scale.log() + _HALF_LOG_TWO_PI
    expected = -_LGAMMA_HALF - 1.5 * loc - torch.exp(-loc + 0.5 * scale**2)
    return -entropy - expected


class GroupHorseshoe(TorchDistribution):
    """The prior of the module docstring over a site of shape ``shape``: one scale per row of its first
    dimension, one global scale C+(0, ``global_scale``) per site.

    Its marginal density over W has no closed form: :meth:`log_prob` is not defined (the objectives read
    the KL to :class:`GroupHorseshoePosterior`); :meth:`sample` draws the hierarchy.
    """

    arg_constraints = {"global_scale": positive_finite}
    support = constraints.real
    has_rsample = False

    def __init__(self, global_scale, shape, validate_args=None):
        self.global_scale = torch.as_tensor(global_scale)
        super().__init__(torch.Size(shape), validate_args=validate_args)

    expand = whole_site_expand

    def log_prob(self, value):
        raise NotImplementedError("the group horseshoe's marginal density has no closed form; its KL is exact")

    def sample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        options = {"dtype": self.global_scale.dtype, "device": self.global_scale.device}
        half = torch.tensor(0.5, **options)

        def half_cauchy(size, scale):  # √(a b), a ~ Gamma(½, rate 1/scale²), b ~ InvGamma(½, 1)
            a = torch.distributions.Gamma(half, 1 / scale**2).sample(size)
            b = 1 / torch.distributions.Gamma(half, torch.ones_like(half)).sample(size)
            return (a * b).sqrt()

        with torch.no_grad():
            rows = half_cauchy(tuple(sample_shape) + _row_shape(self.batch_shape), torch.ones_like(half))
            scale = half_cauchy(tuple(sample_shape) + (1,) * len(self.batch_shape), self.global_scale)
            return torch.randn(shape, **options) * rows * scale


class GroupHorseshoePosterior(SpikeSlabPosterior):
    """q(W) q(a) q(b) of the module docstring: N(m, σ²) over the weights (:class:`SpikeSlabPosterior`) and
    log-normal scale variables.

    Args:
        loc, scale: m and σ of every weight.
        row_locs, row_scales: (2, n, 1, ..., 1): the means and standard deviations of log a_g and log b_g.
        global_locs, global_scales: (2,): those of the site's global log a and log b.

    ``logits`` (and ``probs``) are every weight's unit's inclusion logit 2 E_q[log z_g s], detached.
    """

    def __init__(self, loc, scale, row_locs, row_scales, global_locs, global_scales, validate_args=None):
        self.row_locs, self.row_scales = row_locs, row_scales
        self.global_locs, self.global_scales = global_locs, global_scales
        super().__init__(loc, scale, self.unit_logits().detach(), validate_args=validate_args)

    def unit_logits(self) -> torch.Tensor:
        """2 E_q[log z_g s] of every row, shape (n, 1, ..., 1)."""
        return self.row_locs.sum(0) + self.global_locs.sum()

    expand = whole_site_expand


@register_kl(GroupHorseshoePosterior, GroupHorseshoe)
def _kl_group_horseshoe(q, p):
    """KL(q ‖ p) of the module docstring, each row's scale terms spread over the row, the global ones over the site."""
    one = torch.ones_like(p.global_scale)
    log_scale = 0.5 * (q.unit_logits())  # E[log z_g s]
    inverse_square = torch.exp(
        (0.5 * q.row_scales**2 - q.row_locs).sum(0) + (0.5 * q.global_scales**2 - q.global_locs).sum()
    )
    weights = log_scale - q.scale.log() + 0.5 * (q.loc**2 + q.scale**2) * inverse_square - 0.5
    rows = kl_lognormal_gamma(q.row_locs[0], q.row_scales[0], one) + kl_lognormal_inverse_gamma(
        q.row_locs[1], q.row_scales[1]
    )
    scales = kl_lognormal_gamma(q.global_locs[0], q.global_scales[0], 1 / p.global_scale**2)
    scales = scales + kl_lognormal_inverse_gamma(q.global_locs[1], q.global_scales[1])
    shape = p.batch_shape
    return weights + _spread(rows, shape) + scales / max(1, math.prod(shape))
