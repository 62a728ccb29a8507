r"""A spike-and-slab prior on units: one inclusion indicator per row of a weight tensor.

Paper 003's prior (eq. 3.1) gives every weight its own indicator Z. Here the rows of a site along its
first dimension (a Linear layer's output units, a convolution's output channels) each share one,
Z_g ~ Bernoulli(π), and every weight of the row is N(0, τ1²) if Z_g = 1, N(0, τ0²) otherwise:

    π(W_g, Z_g) = π^{Z_g} (1 − π)^{1 − Z_g} Π_j N(w_gj; 0, τ_{Z_g}²).

With the mean-field q(W) q(Z) of eq. 3.3 (q(w) = N(m, σ²), q(Z_g) = Bernoulli(p_g)) the KL is

    KL = Σ_g [ p_g Σ_j KL(N(m, σ²) ‖ N(0, τ1²)) + (1 − p_g) Σ_j KL(N(m, σ²) ‖ N(0, τ0²))
               + KL(Bernoulli(p_g) ‖ Bernoulli(π)) ],

and its minimum over p_g is reached at logit p*_g = logit π + Σ_j [s_j (1/(2τ0²) − 1/(2τ1²)) + log(τ0/τ1)]
with s_j = m_j² + σ_j², the group form of eq. 3.8: the sum of the row's per-weight logits B − A less
(n_g − 1) logit π. A row of one weight (a bias) is paper 003's prior exactly.

Both distributions keep the site's shape as batch shape, as every site's prior does; the terms of a
row (the indicator's KL, the mixture's log density) are spread evenly over its elements, so that
their sum over the site, the only thing a model or an objective reads, is exact.
"""

import math

import torch
from torch.distributions.kl import register_kl
from torch.distributions.utils import broadcast_all

from bayesprune.core.distributions import (
    SpikeSlabMixture,
    SpikeSlabPosterior,
    log_sigmoids,
    normal_log_prob,
)


def _row_sums(values: torch.Tensor) -> torch.Tensor:
    """Σ over each row (every dimension after the first), kept as a broadcastable (n, 1, ..., 1) tensor."""
    return values.sum(dim=tuple(range(1, values.dim())), keepdim=True) if values.dim() > 1 else values


def _spread(row_values: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """A row's value divided evenly over its elements, in the site's shape."""
    row_size = math.prod(shape[1:]) if len(shape) > 1 else 1
    return (row_values / row_size).expand(shape)


def group_inclusion_logits(loc, scale, pi, tau0, tau1):
    """logit p*_g of every row, shape (n, 1, ..., 1): the minimiser of the KL over p_g (module docstring)."""
    per_weight = (loc**2 + scale**2) * (0.5 / tau0**2 - 0.5 / tau1**2) + torch.log(tau0 / tau1)
    return _row_sums(per_weight) + torch.log(pi / (1 - pi))


def whole_site_expand(prior, batch_shape, _instance=None):
    """``expand`` of a prior over a whole site, its rows grouped: the site's own shape is the only batch shape
    it has (its density couples a row's elements), so any other is refused."""
    if torch.Size(batch_shape) != prior.batch_shape:
        raise ValueError(f"{type(prior).__name__} has the rows of shape {tuple(prior.batch_shape)}; it cannot expand")
    return prior


class GroupSpikeAndSlab(SpikeSlabMixture):
    r"""π(W, Z) of the module docstring, one indicator per row of the first dimension of ``shape``.

    Args:
        pi: prior inclusion probability π of a row, in (0, 1) (0-dim).
        tau0, tau1: standard deviations of the spike and of the slab, τ0 < τ1 (0-dim).
        shape: the site's shape (the batch shape).
    """

    def __init__(self, pi, tau0, tau1, shape, validate_args=None):
        self.pi, self.tau0, self.tau1 = broadcast_all(pi, tau0, tau1)
        self.hyperparameters = (self.pi, self.tau0, self.tau1)
        super().__init__(torch.Size(shape), validate_args=validate_args)

    expand = whole_site_expand

    def log_prob(self, value):
        """log Σ_z π(z) Π_j N(w_gj; 0, τ_z²) of every row, spread over the row's elements."""
        if self._validate_args:
            self._validate_sample(value)
        pi, tau0, tau1 = self.hyperparameters
        slab = pi.log() + _row_sums(normal_log_prob(value, tau1))
        spike = torch.log1p(-pi) + _row_sums(normal_log_prob(value, tau0))
        return _spread(torch.logaddexp(slab, spike), self.batch_shape)

    def sample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        rows = shape[: len(sample_shape) + 1] + (1,) * (len(self.batch_shape) - 1)
        with torch.no_grad():
            slab = torch.bernoulli(self.pi.expand(rows)).bool()
            scale = torch.where(slab, self.tau1, self.tau0).expand(shape)
            return torch.randn(shape, dtype=self.pi.dtype, device=self.pi.device) * scale


class GroupSpikeSlabPosterior(SpikeSlabPosterior):
    """q(W) q(Z) with one inclusion indicator per row: N(m, σ²) over the weights (:class:`SpikeSlabPosterior`),
    and ``row_logits`` (shape (n, 1, ..., 1)) the logit of q(Z_g = 1); ``logits`` holds them broadcast
    to the weights, so ``probs`` is every weight's row's inclusion probability."""

    def __init__(self, loc, scale, row_logits, validate_args=None):
        self.row_logits = row_logits
        super().__init__(loc, scale, row_logits, validate_args=validate_args)

    expand = whole_site_expand


def _normal_kl(loc, scale, tau):
    """KL(N(m, σ²) ‖ N(0, τ²)) elementwise."""
    return torch.log(tau / scale) + (loc**2 + scale**2) / (2 * tau**2) - 0.5


@register_kl(GroupSpikeSlabPosterior, GroupSpikeAndSlab)
def _kl_group_spike_slab(q, p):
    """KL(q(W) q(Z) ‖ π(W, Z)) of the module docstring, each row's indicator term spread over the row."""
    pi, tau0, tau1 = p.hyperparameters
    prob = torch.sigmoid(q.row_logits)
    log_p, log_1mp = log_sigmoids(q.row_logits)
    bernoulli = prob * (log_p - pi.log()) + (1 - prob) * (log_1mp - torch.log1p(-pi))
    slab, spike = _normal_kl(q.loc, q.scale, tau1), _normal_kl(q.loc, q.scale, tau0)
    weights = prob * slab + (1 - prob) * spike
    return weights + _spread(bernoulli, p.batch_shape)
