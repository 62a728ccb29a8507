"""Spike-and-slab prior and its mean-field variational partner (paper 003, section 3.1).

The prior π(W, Z) (eq. 3.1) is represented by its marginal over W, :class:`SpikeAndSlab`; the
variational family q(W) q(Z) (eq. 3.3) by :class:`SpikeSlabPosterior`, a Normal over W that carries
the Bernoulli inclusion logits of Z. Their registered KL is the exact KL of the joint
q(W, Z) ‖ π(W, Z), i.e. the penalty R(θ, p) of eq. 3.7 minus the constant 1/2 per weight, so every
objective, bound and report that calls :func:`torch.distributions.kl_divergence` reads one KL.

PAC-Bayes pruning's spike-and-slab with a point mass at zero is PBP's own:
:class:`bayesprune.methods.pbp.distributions.DiracSpikeSlab`.
"""

import math
from typing import NamedTuple

import torch
from pyro.distributions import TorchDistribution
from torch.distributions import constraints
from torch.distributions.kl import register_kl
from torch.distributions.utils import broadcast_all

from bayesprune.core.fused import FlatPosterior, FlatSite, run_kernel, sigmoid_from_exp

_HALF_LOG_TWO_PI = 0.5 * math.log(2 * math.pi)


class _OpenInterval(constraints.Constraint):
    """The open interval (lower, upper), which (unlike torch's ``positive`` and ``real``) leaves out ±inf
    where a bound is infinite, and NaN."""

    def __init__(self, lower: float, upper: float):
        self.lower, self.upper = lower, upper
        super().__init__()

    def check(self, value):
        return (value > self.lower) & (value < self.upper)

    def __repr__(self):
        return f"{type(self).__name__[1:]}(lower={self.lower}, upper={self.upper})"


#: π = 0 or 1 would make the KL of eq. 3.7 infinite.
_OPEN_UNIT_INTERVAL = _OpenInterval(0.0, 1.0)
#: Scales and locations of a distribution: an infinite one defines none.
positive_finite = _OpenInterval(0.0, math.inf)
finite = _OpenInterval(-math.inf, math.inf)


def broadcast_to_batch(log_prob, batch_shape):
    """``log_prob`` broadcast to ``batch_shape``: one term per element of the batch, also where the value
    and the parameters it was computed from are smaller (a scalar observed in a plate)."""
    return log_prob.expand(torch.broadcast_shapes(log_prob.shape, batch_shape))


def normal_log_prob(value, scale):
    """log N(value; 0, scale²), elementwise."""
    return -0.5 * (value / scale) ** 2 - scale.log() - _HALF_LOG_TWO_PI


class SpikeSlabMixture(TorchDistribution):
    """What a spike-and-slab prior is whatever it mixes over (a weight's or a row's indicator): a zero-mean
    mixture of N(0, τ1²) with weight π and N(0, τ0²), with its arguments' constraints, mean and variance."""

    arg_constraints = {"pi": _OPEN_UNIT_INTERVAL, "tau0": positive_finite, "tau1": positive_finite}
    support = constraints.real
    has_rsample = False

    @property
    def mean(self):
        return self.pi.new_zeros(self.batch_shape)

    @property
    def variance(self):
        return (self.pi * self.tau1**2 + (1 - self.pi) * self.tau0**2).expand(self.batch_shape)


class SpikeAndSlab(SpikeSlabMixture):
    r"""Marginal spike-and-slab prior π·N(0, τ1²) + (1 − π)·N(0, τ0²) with τ0 < τ1 (paper 003, eq. 3.1).

    Args:
        pi: prior inclusion probability π, in (0, 1).
        tau0: standard deviation τ0 of the spike.
        tau1: standard deviation τ1 of the slab.

    ``pi``, ``tau0`` and ``tau1`` have the batch shape (after :meth:`expand` too); ``hyperparameters``
    keeps them as they were given (0-dim in every method), and the density, the KL and p* compute with
    those, so that a weight-sized batch does no weight-sized work on constants.
    """

    def __init__(self, pi, tau0, tau1, validate_args=None):
        self.pi, self.tau0, self.tau1 = broadcast_all(pi, tau0, tau1)
        self.hyperparameters = (self.pi, self.tau0, self.tau1)
        self._constants = None
        super().__init__(self.pi.shape, validate_args=validate_args)
        if self._validate_args and not torch.all(self.tau0 < self.tau1):
            raise ValueError(
                f"Expected parameter tau0 ({self.tau0}) of distribution {type(self).__name__} to lie "
                f"below tau1 ({self.tau1}): the spike is the narrower component"
            )

    @property
    def constants(self) -> "SpikeSlabConstants":
        """The prior's terms of eqs. 3.7-3.8, computed on first use: the prior of a site lives for
        the whole fit, so each step saves a few dozen operations on 0-dim tensors per site."""
        if self._constants is None:
            self._constants = spike_slab_constants(*self.hyperparameters)
        return self._constants

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(SpikeAndSlab, _instance)
        batch_shape = torch.Size(batch_shape)
        new.pi, new.tau0, new.tau1 = (value.expand(batch_shape) for value in (self.pi, self.tau0, self.tau1))
        new.hyperparameters = self.hyperparameters
        new._constants = self._constants
        super(SpikeAndSlab, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        pi, tau0, tau1 = self.hyperparameters
        slab = pi.log() + normal_log_prob(value, tau1)
        spike = torch.log1p(-pi) + normal_log_prob(value, tau0)
        return broadcast_to_batch(torch.logaddexp(slab, spike), self.batch_shape)

    def sample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        with torch.no_grad():
            slab = torch.bernoulli(self.pi.expand(shape))
            scale = torch.where(slab.bool(), self.tau1.expand(shape), self.tau0.expand(shape))
            return torch.randn(shape, dtype=self.pi.dtype, device=self.pi.device) * scale


class SpikeSlabPosterior(FlatSite, TorchDistribution):
    r"""Mean-field q(w) = N(m, σ²) with an independent inclusion indicator Z ~ Bernoulli(p) (paper 003, eq. 3.3).

    As a distribution over the weight it is the Normal N(m, σ²); the inclusion probability
    p = sigmoid(``logits``) enters only through the KL to :class:`SpikeAndSlab`.

    Args:
        loc: variational mean m.
        scale: variational standard deviation σ > 0.
        logits: logit of the inclusion probability p.
    """

    arg_constraints = {"loc": finite, "scale": positive_finite, "logits": constraints.real}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, logits, validate_args=None):
        self.loc, self.scale, self.logits = broadcast_all(loc, scale, logits)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(SpikeSlabPosterior, _instance)
        batch_shape = torch.Size(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.scale = self.scale.expand(batch_shape)
        new.logits = self.logits.expand(batch_shape)
        super(SpikeSlabPosterior, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def probs(self):
        """Inclusion probabilities p = q(Z = 1)."""
        return torch.sigmoid(self.logits)

    @property
    def mean(self):
        return self.loc

    @property
    def variance(self):
        return self.scale**2

    def rsample(self, sample_shape=torch.Size()):
        """m + σ ε; a site of a network-wide posterior draws with all the others and their KLs
        (:meth:`bayesprune.core.fused.FlatPosterior.site_draw`)."""
        if self._segment is not None and not sample_shape:
            posterior, index = self._segment
            return posterior.site_draw(index)
        shape = self._extended_shape(sample_shape)
        eps = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + self.scale * eps

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return normal_log_prob(value - self.loc, self.scale)

    def entropy(self):
        return 0.5 + _HALF_LOG_TWO_PI + self.scale.log()


def log_sigmoids(x):
    """(log sigmoid(x), log sigmoid(−x)), as F.logsigmoid gives them, without subnormal intermediates.

    F.logsigmoid evaluates exp(−|x|), which is subnormal for 87 < |x| < 104, a range the logits of
    eq. 3.8 visit for a few percent of the weights, and subnormal arithmetic makes it ~10x slower on
    CPU. Clamping |x| at 80 changes the results by less than 2e-35; the log1p term is shared, and
    min(x, 0) = (x − |x|)/2 keeps the gradient at x = 0 equal to F.logsigmoid's (1/2).
    """
    magnitude = x.abs()
    log1p_exp = torch.log1p(torch.exp(-magnitude.clamp_max(80)))
    return 0.5 * (x - magnitude) - log1p_exp, -0.5 * (x + magnitude) - log1p_exp


class SpikeSlabConstants(NamedTuple):
    """The hyper-parameter terms of eqs. 3.7-3.8, computed once per prior (not per step and site)."""

    slab_quadratic: torch.Tensor  # 1 / (2 τ1²)
    spike_quadratic: torch.Tensor  # 1 / (2 τ0²)
    log_slab: torch.Tensor  # log(τ1 / π)
    log_spike: torch.Tensor  # log(τ0 / (1 − π))
    logit_quadratic: torch.Tensor  # 1 / (2 τ0²) − 1 / (2 τ1²)
    logit_offset: torch.Tensor  # log(τ0 π / (τ1 (1 − π)))


def spike_slab_constants(pi, tau0, tau1) -> SpikeSlabConstants:
    """:class:`SpikeSlabConstants` of the prior (π, τ0, τ1)."""
    return SpikeSlabConstants(
        slab_quadratic=0.5 / tau1**2,
        spike_quadratic=0.5 / tau0**2,
        log_slab=torch.log(tau1 / pi),
        log_spike=torch.log(tau0 / (1 - pi)),
        logit_quadratic=0.5 / tau0**2 - 0.5 / tau1**2,
        logit_offset=torch.log(tau0 * pi / (tau1 * (1 - pi))),
    )


def inclusion_logits(loc, scale, pi, tau0, tau1, *, constants=None):
    r"""Logit of the optimal inclusion probability, B − A of eq. 3.8 (paper 003, Proposition 3.2).

    p*(m, σ) = 1 / (1 + exp(A − B)) with A = (m² + σ²)/(2τ1²) + log(τ1/π) and
    B = (m² + σ²)/(2τ0²) + log(τ0/(1 − π)). Algorithm 1, step 9 of the paper prints ``m + σ²`` in A;
    eq. 3.8 and its proof (supplement S2) have m², which is what is implemented. ``constants``
    (:func:`spike_slab_constants` of the same π, τ0, τ1) saves recomputing the prior's terms.
    """
    constants = constants or spike_slab_constants(pi, tau0, tau1)
    second_moment = loc**2 + scale**2
    return second_moment * constants.logit_quadratic + constants.logit_offset


def spike_slab_penalty(loc, scale, logits, pi, tau0, tau1, *, constants=None):
    r"""Penalty R(θ, p) of eq. 3.7 (paper 003), elementwise, with p = sigmoid(logits).

    R = p [ (m²+σ²)/(2τ1²) + log(τ1 p / (σ π)) ] + (1 − p) [ (m²+σ²)/(2τ0²) + log(τ0 (1−p) / (σ (1−π))) ],
    evaluated as p [(m²+σ²)/(2τ1²) + log(τ1/π) + log p] + (1 − p) [(m²+σ²)/(2τ0²) + log(τ0/(1−π)) + log(1 − p)] − log σ.
    Logits keep log p and log(1 − p) finite when p saturates. ``constants`` as in :func:`inclusion_logits`.
    """
    constants = constants or spike_slab_constants(pi, tau0, tau1)
    second_moment = loc**2 + scale**2
    return _spike_slab_penalty(second_moment, scale, logits, torch.sigmoid(logits), constants)


class SpikeSlabPosteriors(FlatPosterior):
    r"""The sites of one network-wide mean-field posterior: flat m, σ and logits, one
    :class:`SpikeSlabPosterior` per site whose parameters are views of them.

    The KL of every site to the model's spike-and-slab priors (which must share the 0-dim
    hyper-parameters π, τ0, τ1 of ``constants``) comes from one fused evaluation of eq. 3.7 and its
    gradient over the flat vectors (:meth:`kl_terms`, :func:`bayesprune.core.fused.summed_kl`).

    Args:
        loc, scale: flat m and σ of every weight, in site order; the logits of p*(m, σ) (eq. 3.8)
            follow, detached (p is held fixed in the gradient step).
        shapes: site name → shape, in the order of the flat vectors.
        priors: the prior (``SpikeAndSlab``, no ``Independent`` wrapper) of every site.
        constants: :class:`SpikeSlabConstants` (0-dim) equal to those of every prior in ``priors``.
    """

    def __init__(self, loc, scale, shapes: dict, priors, constants: "SpikeSlabConstants"):
        super().__init__(shapes, priors)
        self.loc, self.scale, self.constants = loc, scale, constants
        with torch.no_grad():  # m² + σ², shared by p* (eq. 3.8) and the KL's terms
            self.second_moment, self.logits = run_kernel(
                _second_moment_and_logits,
                loc,
                scale,
                quadratic=constants.logit_quadratic,
                offset=constants.logit_offset,
            )
        self.make_sites(SpikeSlabPosterior, loc, scale, self.logits)

    def kl_terms(self) -> tuple:
        """:func:`_spike_slab_kl_terms` of the flat m and σ at the detached p = p*."""
        c = self.constants
        return (
            _spike_slab_kl_terms,
            (self.loc, self.scale, self.second_moment, self.logits),
            dict(
                log_slab=c.log_slab,
                slab_quadratic=c.slab_quadratic,
                log_spike=c.log_spike,
                spike_quadratic=c.spike_quadratic,
            ),
        )


def _second_moment_and_logits(loc, scale, *, quadratic, offset):
    """s = m² + σ² and the logit of p*, s (1/(2τ0²) − 1/(2τ1²)) + log(τ0 π/(τ1 (1 − π))) (eq. 3.8)."""
    second_moment = loc**2 + scale**2
    return second_moment, second_moment * quadratic + offset


def _spike_slab_kl_terms(loc, scale, second_moment, logits, *, log_slab, slab_quadratic, log_spike, spike_quadratic):
    r"""KL(q ‖ π) = R(θ, p) − 1/2 per weight (eq. 3.7, supplement S1) at the detached p = p*, and its
    gradient in m and σ.

    At p = p* = sigmoid(B − A) (eq. 3.8) with A = s/(2τ1²) + log(τ1/π), B = s/(2τ0²) + log(τ0/(1 − π))
    and s = m² + σ², R = p A + (1 − p) B + p log p + (1 − p) log(1 − p) − log σ collapses to
    min(A, B) − log(1 + exp(−|B − A|)) − log σ = min(A, B) − log((1 + e) σ) with e = exp(−|B − A|),
    which needs no log p, and p = sigmoid(B − A) from the same e. With p held fixed,
    ∂R/∂s = p/(2τ1²) + (1 − p)/(2τ0²), so ∂R/∂m = 2m ∂R/∂s and ∂R/∂σ = 2σ ∂R/∂s − 1/σ.
    """
    e = logits.abs().clamp_max_(80).neg_().exp_()  # no subnormal e (10x slower arithmetic): off by < 2e-35
    w = e + 1
    value = torch.minimum(
        torch.addcmul(log_slab, second_moment, slab_quadratic), torch.addcmul(log_spike, second_moment, spike_quadratic)
    )
    value -= (w * scale).log_()
    value -= 0.5
    p = sigmoid_from_exp(logits, e, w)
    slope = torch.lerp(2 * spike_quadratic, 2 * slab_quadratic, p)  # 2 ∂R/∂s
    return value, (loc * slope, (scale * slope).sub_(scale.reciprocal()), None, None)


def _spike_slab_penalty(second_moment, scale, logits, p, constants):
    log_p, log_1mp = log_sigmoids(logits)
    slab = second_moment * constants.slab_quadratic + (log_p + constants.log_slab)
    spike = second_moment * constants.spike_quadratic + (log_1mp + constants.log_spike)
    return p * slab + (1 - p) * spike - scale.log()


@register_kl(SpikeSlabPosterior, SpikeAndSlab)
def _kl_spike_slab(q, p):
    """KL(q(W) q(Z) ‖ π(W, Z)) = R(θ, p) − 1/2 per weight (paper 003, supplement S1), elementwise; the
    objectives read a network-wide posterior's sums instead (:meth:`SpikeSlabPosteriors.kl_terms`)."""
    kl = spike_slab_penalty(q.loc, q.scale, q.logits, *p.hyperparameters, constants=p.constants) - 0.5
    return broadcast_to_batch(kl, p.batch_shape)
