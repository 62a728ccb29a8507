"""Hyper-priors p(π | Γ) on the Bernoulli unit-gate priors, and what they contribute to ∂L/∂θ (paper 004, section 4).

A unit's gate ξ has prior Bernoulli(π) and variational posterior Bernoulli(θ). For a given θ the
prior parameter is set to its optimum π*(θ) = argmin J(π) on [ε1, 1 − ε2] (eqs. 10-11),

    J(π) = (1 − θ) log((1 − θ)/(1 − π)) + θ log(θ/π) − log p(π | Γ),

and the objective's derivative in θ becomes (eq. 19)

    ∂L/∂θ = C1 − C0 + log(θ (1 − π*) / ((1 − θ) π*)) = C1 − C0 + logit θ − logit π*(θ).

Each hyper-prior gives π*(θ) in closed form through its logit (float64, so that the tiny γ and ε of
the paper's configs neither underflow nor round to 1) and the regularising term of ∂L/∂θ.
"""

import math

import torch

from bayesprune.core.validation import is_number, require


def _logit(p: float) -> float:
    return math.log(p) - math.log1p(-p)


class HyperPrior:
    """Base: ``logit_optimal_pi(θ)`` (eq. 11) and ``theta_gradient(θ)``, the regularising part of eq. 19."""

    def logit_optimal_pi(self, theta: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def optimal_pi(self, theta: torch.Tensor) -> torch.Tensor:
        """π*(θ) of eq. 11."""
        return torch.sigmoid(self.logit_optimal_pi(theta))

    def theta_gradient(self, theta: torch.Tensor) -> torch.Tensor:
        """log(θ (1 − π*) / ((1 − θ) π*)) of eq. 19 (eqs. 27 and 31 in closed form), in θ's dtype."""
        theta64 = theta.double()
        return (torch.logit(theta64) - self.logit_optimal_pi(theta64)).to(theta.dtype)

    def log_density(self, pi: torch.Tensor) -> torch.Tensor:
        """log p(π | Γ) up to a constant (the oracle of eq. 10's numerical minimisation)."""
        raise NotImplementedError


class BetaHyperPrior(HyperPrior):
    """p(π | α, β) = Beta(α, β) (section 4.1): π* of eq. 26, ∂L/∂θ of eq. 27.

    In the middle case π* = (θ + α − 1)/(α + β − 1), so logit π* = log(θ + α − 1) − log(β − θ); π* is
    clamped to [ε1, 1 − ε2], which gives eq. 26's outer cases. Needs β > 1 (the paper's choice).
    """

    def __init__(self, alpha: float, beta: float, *, eps1: float, eps2: float):
        require(is_number(alpha) and alpha > 0, "hyperprior alpha", "be positive", alpha)
        require(is_number(beta) and beta > 1, "hyperprior beta", "be above 1 (eq. 26)", beta)
        _check_eps(eps1, eps2)
        self.alpha, self.beta, self.eps1, self.eps2 = float(alpha), float(beta), float(eps1), float(eps2)

    def logit_optimal_pi(self, theta):
        theta = theta.double()
        shifted = (theta + (self.alpha - 1.0)).clamp_min(0.0)  # π* = ε1 where θ ≤ 1 − α
        middle = torch.log(shifted) - torch.log(self.beta - theta)
        return middle.clamp(_logit(self.eps1), -_logit(self.eps2))

    def log_density(self, pi):
        return (self.alpha - 1) * torch.log(pi) + (self.beta - 1) * torch.log1p(-pi)


class FlatteningHyperPrior(HyperPrior):
    """p(π | γ) ∝ 1 / (1 + (γ − 1)(1 − π)) (eq. 29): π* of eq. 30 and the flat −log γ of eq. 31.

    In the middle case π* = γθ / (1 + θ(γ − 1)), so logit π* = logit θ + log γ, clamped to
    [ε1, 1 − ε2]: the regularising term is −log γ for θ in (θ1, θ2) with logit θ1 = logit ε1 − log γ.
    The flat part therefore exists only where ε1 ≪ γ: with the paper's log γ = −25, ε1 must be far
    below e^−25 (the defaults take ε1 = ε2 = 1e-30, so θ1 ≈ 1e-19).
    """

    def __init__(self, log_gamma: float, *, eps1: float, eps2: float):
        require(
            is_number(log_gamma) and log_gamma < 0,
            "hyperprior log_gamma",
            "be negative (γ < 1, section 4.2)",
            log_gamma,
        )
        _check_eps(eps1, eps2)
        self.log_gamma, self.eps1, self.eps2 = float(log_gamma), float(eps1), float(eps2)

    def logit_optimal_pi(self, theta):
        return (torch.logit(theta.double()) + self.log_gamma).clamp(_logit(self.eps1), -_logit(self.eps2))

    def log_density(self, pi):
        # 1 + (γ − 1)(1 − π) = π + γ(1 − π), in logs for tiny γ.
        return -torch.logaddexp(torch.log(pi), self.log_gamma + torch.log1p(-pi))


class SALHyperPrior(HyperPrior):
    """Stochastic Architecture Learning's choice (paper 004's reference [17]): π* = θ under a
    Beta(α, β) hyper-prior with α, β < 1. The KL term of eq. 14 then vanishes and the regularising
    part of ∂L/∂θ is the derivative of −log Beta(θ | α, β): (1 − α)/θ − (1 − β)/(1 − θ).
    """

    def __init__(self, alpha: float = 0.099, beta: float = 0.99):
        require(is_number(alpha) and alpha > 0, "hyperprior alpha", "be positive", alpha)
        require(is_number(beta) and beta > 0, "hyperprior beta", "be positive", beta)
        self.alpha, self.beta = float(alpha), float(beta)

    def logit_optimal_pi(self, theta):
        return torch.logit(theta.double())

    def theta_gradient(self, theta):
        theta64 = theta.double()
        return ((1 - self.alpha) / theta64 - (1 - self.beta) / (1 - theta64)).to(theta.dtype)

    def log_density(self, pi):
        return (self.alpha - 1) * torch.log(pi) + (self.beta - 1) * torch.log1p(-pi)


def _check_eps(eps1, eps2):
    for name, value in (("eps1", eps1), ("eps2", eps2)):
        require(is_number(value) and 0 < value < 0.5, f"hyperprior {name}", "lie in (0, 0.5)", value)
