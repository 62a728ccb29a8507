"""The log-uniform prior and the additive-noise Gaussian family of Sparse VD, with their registered KL.

Molchanov, Ashukha and Vetrov (2017), "Variational Dropout Sparsifies Deep Neural Networks" (ICML):
every weight has the improper log-uniform prior p(|w|) ∝ 1/|w| (section 4.1) and the variational
posterior q(w | θ, σ²) = N(θ, σ²) in the additive-noise parameterisation (θ, log σ²) of eqs. 15-16,
whose dropout rate is α = σ²/θ². The KL of q to the prior is defined only up to a constant and has no
closed form; eq. 14 approximates its negative by

    −KL ≈ k1 σ(k2 + k3 log α) − ½ log(1 + 1/α) − k1,   k1 = 0.63576, k2 = 1.87320, k3 = 1.48695,

with the constant C = −k1 chosen so that −KL → 0 as α → ∞. :func:`neg_kl_approximation` is that
formula, and the KL registered between :class:`AdditiveNormal` and :class:`LogUniform` is its negative
per weight (≥ 0, 0 at α = ∞), so every objective reading ``kl_divergence`` reads the paper's KL.
"""

import math

import torch
from pyro.distributions import TorchDistribution
from torch.distributions import constraints
from torch.distributions.kl import register_kl
from torch.distributions.utils import broadcast_all

from bayesprune.core.distributions import broadcast_to_batch, finite
from bayesprune.core.fused import FlatPosterior, FlatSite, log1p

#: The constants of eq. 14 (section 4.2).
K1, K2, K3 = 0.63576, 1.87320, 1.48695

#: log α is clipped to [−8, 8] wherever the objective reads it, as in the authors' code: beyond that
#: range the approximate KL is flat to within 2e-4 and the clip keeps exp(log α) finite.
LOG_ALPHA_CLIP = 8.0

#: Added to θ² inside log θ² so that a weight at exactly zero has a finite (large) log α.
THETA_EPS = 1e-8

#: The pruning rule of section 5: a weight is removed where log α > 3 (dropout rate above ~0.95).
LOG_ALPHA_THRESHOLD = 3.0


def neg_kl_approximation(log_alpha: torch.Tensor) -> torch.Tensor:
    """−KL(q(w | θ, α) ‖ p(w)) of the log-uniform prior by eq. 14, per weight, with C = −k1.

    Accurate to about 0.01 against the exact value (up to its constant) for every α; tends to 0 as
    α → ∞ and to −∞ (as ½ log α) as α → 0.
    """
    return K1 * torch.sigmoid(K2 + K3 * log_alpha) - 0.5 * torch.nn.functional.softplus(-log_alpha) - K1


def log_alpha(theta: torch.Tensor, log_sigma2: torch.Tensor, *, clip: float | None = LOG_ALPHA_CLIP) -> torch.Tensor:
    """log α = log σ² − log θ² per weight (eq. 15's α = σ²/θ²), clipped to [−clip, clip] unless ``clip`` is None."""
    value = log_sigma2 - torch.log(theta * theta + THETA_EPS)
    return value if clip is None else value.clamp(-clip, clip)


class _NonzeroReal(constraints.Constraint):
    """The real numbers but 0, where the density 1/|w| of the log-uniform prior is infinite."""

    def check(self, value):
        return ~torch.isnan(value) & (value != 0)


class LogUniform(TorchDistribution):
    r"""The improper log-uniform prior p(|w|) ∝ 1/|w| on the real line (section 4.1), one per weight.

    It has no normaliser and cannot be sampled; ``log_prob`` is −log|w| (up to the infinite constant).
    Its only use is as the model's prior of a weight site, whose KL from :class:`AdditiveNormal` is
    registered (eq. 14).
    """

    arg_constraints = {}
    support = _NonzeroReal()
    has_rsample = False

    def __init__(self, batch_shape=torch.Size(), *, device=None, dtype=torch.float32, validate_args=None):
        self._device, self._dtype = device, dtype
        super().__init__(torch.Size(batch_shape), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LogUniform, _instance)
        new._device, new._dtype = self._device, self._dtype
        super(LogUniform, new).__init__(torch.Size(batch_shape), validate_args=False)
        new._validate_args = self._validate_args
        return new

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return broadcast_to_batch(-torch.log(value.abs()), self.batch_shape)

    def sample(self, sample_shape=torch.Size()):
        raise NotImplementedError("the log-uniform prior is improper: it has no samples")

    @property
    def mean(self):
        return torch.full(self.batch_shape, math.nan, device=self._device, dtype=self._dtype)

    @property
    def variance(self):
        return torch.full(self.batch_shape, math.inf, device=self._device, dtype=self._dtype)


class AdditiveNormal(FlatSite, TorchDistribution):
    r"""q(w) = N(θ, σ²) parameterised by θ and log σ² (the additive noise reparameterisation, eqs. 15-16).

    ``rsample`` draws w = θ + σ·ε with ε ~ N(0, 1): the noise does not multiply θ, so the gradient
    with respect to θ does not grow with α (section 4.3). ``log_alpha`` is log σ²/θ², clipped
    as the objective reads it (:data:`LOG_ALPHA_CLIP`).

    Args:
        loc: θ.
        log_sigma2: log σ².
    """

    arg_constraints = {"loc": finite, "log_sigma2": finite}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, log_sigma2, validate_args=None):
        self.loc, self.log_sigma2 = broadcast_all(loc, log_sigma2)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(AdditiveNormal, _instance)
        batch_shape = torch.Size(batch_shape)
        new.loc, new.log_sigma2 = self.loc.expand(batch_shape), self.log_sigma2.expand(batch_shape)
        super(AdditiveNormal, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def scale(self) -> torch.Tensor:
        return torch.exp(0.5 * self.log_sigma2)

    @property
    def variance(self) -> torch.Tensor:
        return torch.exp(self.log_sigma2)

    @property
    def mean(self) -> torch.Tensor:
        return self.loc

    @property
    def log_alpha(self) -> torch.Tensor:
        return log_alpha(self.loc, self.log_sigma2)

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        noise = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + self.scale * noise

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -0.5 * ((value - self.loc) ** 2 / self.variance + self.log_sigma2 + math.log(2 * math.pi))

    def entropy(self):
        return 0.5 * (self.log_sigma2 + math.log(2 * math.pi) + 1.0)


@register_kl(AdditiveNormal, LogUniform)
def _kl_additive_normal_log_uniform(q, p):
    """KL(q ‖ log-uniform) per weight by eq. 14, up to the prior's constant: k1 − k1 σ(k2 + k3 log α)
    + ½ log(1 + 1/α), with log α clipped to ±:data:`LOG_ALPHA_CLIP` as the authors' code does."""
    return broadcast_to_batch(-neg_kl_approximation(q.log_alpha), p.batch_shape)


class AdditiveNormals(FlatPosterior):
    """The sites of q(W) over a whole network: flat θ and log σ², one :class:`AdditiveNormal` per site whose
    parameters are views of them, and the KL of every site to the log-uniform prior from one fused
    evaluation of eq. 14 with its gradient (:func:`bayesprune.core.fused.summed_kl`).

    Args:
        loc, log_sigma2: flat θ and log σ² of every weight, in site order.
        shapes: site name → shape, in the order of the flat vectors.
    """

    def __init__(self, loc, log_sigma2, shapes: dict):
        super().__init__(shapes)
        self.loc, self.log_sigma2 = loc, log_sigma2
        self.make_sites(AdditiveNormal, loc, log_sigma2)

    def covers(self, prior) -> bool:
        return isinstance(prior, LogUniform)

    def kl_terms(self) -> tuple:
        """:func:`_additive_normal_kl_terms` of the flat θ and log σ²."""
        return _additive_normal_kl_terms, (self.loc, self.log_sigma2), {}


def _additive_normal_kl_terms(loc, log_sigma2):
    r"""KL = k1 − k1 σ(k2 + k3 log α) + ½ log(1 + 1/α) per weight (eq. 14 negated) at log α clipped to
    ±:data:`LOG_ALPHA_CLIP`, and its gradient: with a = log α = log σ² − log(θ² + ε) inside the clip,
    ∂KL/∂a = −k1 k3 σ(t)(1 − σ(t)) − ½ σ(−a) at t = k2 + k3 a, ∂a/∂θ = −2θ/(θ² + ε), ∂a/∂log σ² = 1;
    outside the clip both are 0 (as ``clamp``'s gradient)."""
    squared = loc * loc + THETA_EPS
    raw = log_sigma2 - squared.log()
    value = raw.clamp(-LOG_ALPHA_CLIP, LOG_ALPHA_CLIP)
    gate = torch.sigmoid(value * K3 + K2)
    slope = torch.sigmoid(-value).mul_(-0.5).sub_(gate * (1 - gate) * (K1 * K3))
    slope.mul_(raw.abs_() <= LOG_ALPHA_CLIP)
    value = log1p(value.neg_().exp_()).mul_(0.5).sub_(gate.mul_(K1)).add_(K1)
    return value, (slope * loc * -2 / squared, slope)
