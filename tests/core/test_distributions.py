"""Tests of bayesprune.core.distributions against independent oracles.

Oracles: numerical minimisation (scipy), Monte-Carlo estimates written with plain
``torch.distributions.Normal``/``Bernoulli``, closed-form Gaussian and Bernoulli KLs from torch,
numerical quadrature and a Kolmogorov-Smirnov test against the mixture CDF.
"""

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import integrate, optimize, stats
from torch.distributions import Bernoulli, Normal, kl_divergence

from bayesprune.core.distributions import SpikeAndSlab, SpikeSlabPosterior, inclusion_logits, spike_slab_penalty
from bayesprune.core.errors import ConfigError
from bayesprune.models.priors import SpikeSlabPrior

DOUBLE = torch.float64


def t(value):
    """A float64 tensor."""
    return torch.as_tensor(value, dtype=DOUBLE)


def joint_kl_closed_form(loc, scale, probs, pi, tau0, tau1):
    """KL(q(W)q(Z) || pi(W, Z)) from torch's own Gaussian and Bernoulli KLs.

    The chain rule of KL gives
    KL(Bern(p) || Bern(pi)) + p KL(N(m, s) || N(0, tau1)) + (1 - p) KL(N(m, s) || N(0, tau0)).
    """
    q_w = Normal(loc, scale)
    zero = torch.zeros_like(loc)
    return (
        kl_divergence(Bernoulli(probs=probs), Bernoulli(probs=pi * torch.ones_like(probs)))
        + probs * kl_divergence(q_w, Normal(zero, tau1 * torch.ones_like(loc)))
        + (1 - probs) * kl_divergence(q_w, Normal(zero, tau0 * torch.ones_like(loc)))
    )


def joint_kl_monte_carlo(loc, scale, probs, pi, tau0, tau1, num_samples):
    """Monte-Carlo KL(q(W)q(Z) || pi(W, Z)) and its standard error, sampling both W and Z.

    The integrand is log N(w; m, s) + log Bern(z; p) - log[pi^z (1-pi)^(1-z) N(w; 0, tau_z^2)].
    """
    w = Normal(loc, scale).sample((num_samples,))
    z = Bernoulli(probs=probs).sample((num_samples,))
    tau_z = torch.where(z.bool(), tau1 * torch.ones_like(w), tau0 * torch.ones_like(w))
    log_prior = z * math.log(pi) + (1 - z) * math.log(1 - pi) + Normal(torch.zeros_like(w), tau_z).log_prob(w)
    log_q = Normal(loc, scale).log_prob(w) + Bernoulli(probs=probs).log_prob(z)
    integrand = log_q - log_prior
    return integrand.mean(0), integrand.std(0) / math.sqrt(num_samples)


# Proposition 3.2: the closed-form optimal inclusion probability.


@pytest.mark.parametrize("pi", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("taus", [(math.exp(-6.0), math.exp(1.0)), (0.1, 1.0), (0.5, 0.6)])
def test_inclusion_probability_minimises_penalty(pi, taus):
    """sigmoid(inclusion_logits) equals scipy's bounded minimiser of R(theta, p) over p in (0, 1)."""
    tau0, tau1 = taus
    for m, s in itertools.product([0.0, 0.02, -0.3, 1.5], [1e-3, 0.05, 0.8]):
        args = (t(m), t(s))
        prior = (t(pi), t(tau0), t(tau1))

        def penalty_of_logit(logit, args=args, prior=prior):
            return spike_slab_penalty(*args, t(logit), *prior).item()

        def penalty_at(p):
            return penalty_of_logit(math.log(p) - math.log1p(-p))

        result = optimize.minimize_scalar(
            penalty_at, bounds=(1e-14, 1 - 1e-14), method="bounded", options={"xatol": 1e-12, "maxiter": 500}
        )
        logit_star = inclusion_logits(*args, *prior)
        p_star = torch.sigmoid(logit_star).item()
        assert p_star == pytest.approx(result.x, abs=1e-6), (m, s, pi, tau0, tau1)
        # The closed form is at least as good as the numerical optimum and as every point of a grid.
        best = penalty_of_logit(logit_star.item())
        assert best <= result.fun + 1e-9
        for p in np.linspace(0.01, 0.99, 25):
            assert best <= penalty_at(p) + 1e-12


def test_inclusion_logits_broadcast_elementwise():
    """Vectorised inclusion_logits equals the paper's scalar formula B - A evaluated one weight at a time."""
    loc, scale = torch.randn(4, 5, dtype=DOUBLE), torch.rand(4, 5, dtype=DOUBLE) + 0.01
    pi, tau0, tau1 = t(0.3), t(0.2), t(1.7)
    logits = inclusion_logits(loc, scale, pi, tau0, tau1)
    assert logits.shape == (4, 5)
    for i, j in itertools.product(range(4), range(5)):
        second = loc[i, j].item() ** 2 + scale[i, j].item() ** 2
        a = second / (2 * 1.7**2) + math.log(1.7 / 0.3)
        b = second / (2 * 0.2**2) + math.log(0.2 / 0.7)
        assert logits[i, j].item() == pytest.approx(b - a, rel=1e-12, abs=1e-12)


# Registered KL == KL of the joint q(W) q(Z) || pi(W, Z) == R - 1/2.

KL_CASES = [
    # shape, pi, tau0, tau1, loc range, scale range
    ((), 0.5, 0.3, 1.0, 0.5, (0.2, 0.6)),
    ((3,), 0.2, 0.2, 2.0, 1.0, (0.05, 0.5)),
    ((4, 5), 0.7, 0.4, 1.5, 1.5, (0.1, 1.0)),
    ((2, 3), 0.5, math.exp(-2.0), math.exp(1.0), 0.3, (0.05, 0.3)),
]


def _random_posterior(shape, loc_range, scale_range):
    loc = (2 * torch.rand(shape, dtype=DOUBLE) - 1) * loc_range
    scale = scale_range[0] + (scale_range[1] - scale_range[0]) * torch.rand(shape, dtype=DOUBLE)
    logits = 3 * torch.randn(shape, dtype=DOUBLE)
    return loc, scale, logits


@pytest.mark.parametrize("shape, pi, tau0, tau1, loc_range, scale_range", KL_CASES)
def test_registered_kl_matches_monte_carlo(shape, pi, tau0, tau1, loc_range, scale_range):
    """kl_divergence(SpikeSlabPosterior, SpikeAndSlab) agrees with a 200k-sample MC estimate of the joint KL."""
    loc, scale, logits = _random_posterior(shape, loc_range, scale_range)
    q = SpikeSlabPosterior(loc, scale, logits)
    prior = SpikeAndSlab(t(pi), t(tau0), t(tau1))
    kl = kl_divergence(q, prior)
    assert kl.shape == torch.Size(shape)
    mc, se = joint_kl_monte_carlo(loc, scale, torch.sigmoid(logits), pi, tau0, tau1, num_samples=200_000)
    assert torch.all((kl - mc).abs() <= 5 * se + 1e-9), (kl, mc, se)
    # R of eq. 3.7 equals the KL up to the constant 1/2 per weight (Proposition 3.1 / supplement S1).
    penalty = spike_slab_penalty(loc, scale, logits, t(pi), t(tau0), t(tau1))
    assert torch.all((penalty - 0.5 - mc).abs() <= 5 * se + 1e-9)


@pytest.mark.parametrize("shape, pi, tau0, tau1, loc_range, scale_range", KL_CASES)
def test_registered_kl_matches_chain_rule(shape, pi, tau0, tau1, loc_range, scale_range):
    """Registered KL equals KL(Bern||Bern) + p KL(N||slab) + (1-p) KL(N||spike) from torch's closed forms."""
    loc, scale, logits = _random_posterior(shape, loc_range, scale_range)
    kl = kl_divergence(SpikeSlabPosterior(loc, scale, logits), SpikeAndSlab(t(pi), t(tau0), t(tau1)))
    expected = joint_kl_closed_form(loc, scale, torch.sigmoid(logits), pi, tau0, tau1)
    torch.testing.assert_close(kl, expected, rtol=1e-10, atol=1e-10)
    assert torch.all(kl >= 0)


@pytest.mark.parametrize("logit", [-60.0, -25.0, 25.0, 60.0])
def test_kl_finite_when_inclusion_saturates(logit):
    """With p at 0 or 1 up to rounding the KL is finite and equals the one-component Gaussian KL (the limit)."""
    loc, scale = t([0.3, -1.0]), t([0.2, 0.5])
    pi, tau0, tau1 = 0.4, 0.1, 2.0
    kl = kl_divergence(SpikeSlabPosterior(loc, scale, t(logit)), SpikeAndSlab(t(pi), t(tau0), t(tau1)))
    assert torch.isfinite(kl).all()
    if logit > 0:
        limit = kl_divergence(Normal(loc, scale), Normal(t(0.0), t(tau1))) - math.log(pi)
    else:
        limit = kl_divergence(Normal(loc, scale), Normal(t(0.0), t(tau0))) - math.log(1 - pi)
    torch.testing.assert_close(kl, limit, rtol=1e-8, atol=1e-8)


def test_kl_of_independent_sites_sums_event_dims():
    """KL between to_event() wrapped site distributions is the sum of the elementwise KLs."""
    loc, scale, logits = _random_posterior((4, 5), 1.0, (0.1, 0.5))
    prior = SpikeAndSlab(t(0.5), t(0.2), t(1.0))
    elementwise = joint_kl_closed_form(loc, scale, torch.sigmoid(logits), 0.5, 0.2, 1.0)
    q = SpikeSlabPosterior(loc, scale, logits).to_event(2)
    p = prior.expand((4, 5)).to_event(2)
    total = kl_divergence(q, p)
    assert total.shape == ()
    torch.testing.assert_close(total, elementwise.sum(), rtol=1e-10, atol=1e-10)
    partial = kl_divergence(SpikeSlabPosterior(loc, scale, logits).to_event(1), prior.expand((4, 5)).to_event(1))
    torch.testing.assert_close(partial, elementwise.sum(-1), rtol=1e-10, atol=1e-10)


# SpikeAndSlab as a distribution.

PRIOR_PARAMS = [
    (0.5, 0.1, 1.0),
    (0.2, math.exp(-6.0), math.exp(1.0)),
    (0.9, 0.5, 0.7),
]


@pytest.mark.parametrize("pi, tau0, tau1", PRIOR_PARAMS)
def test_spike_slab_log_prob_is_mixture_density(pi, tau0, tau1):
    """log_prob equals log(pi N(w;0,tau1^2) + (1-pi) N(w;0,tau0^2)) from torch Normals, and integrates to one."""
    d = SpikeAndSlab(t(pi), t(tau0), t(tau1))
    w = torch.cat([torch.linspace(-5, 5, 201, dtype=DOUBLE), t([0.0, 1e-4, -3 * tau0, 40.0])])
    mixture = pi * Normal(t(0.0), t(tau1)).log_prob(w).exp() + (1 - pi) * Normal(t(0.0), t(tau0)).log_prob(w).exp()
    expected = torch.logaddexp(
        math.log(pi) + Normal(t(0.0), t(tau1)).log_prob(w), math.log(1 - pi) + Normal(t(0.0), t(tau0)).log_prob(w)
    )
    torch.testing.assert_close(d.log_prob(w), expected, rtol=1e-12, atol=1e-12)
    finite = mixture > 1e-300
    torch.testing.assert_close(d.log_prob(w)[finite], mixture[finite].log(), rtol=1e-10, atol=1e-10)

    def density(x):
        return d.log_prob(t(x)).exp().item()

    # Integrate piecewise so quad resolves the narrow spike.
    edges = [-np.inf, -10 * tau0, 10 * tau0, np.inf]
    total = sum(integrate.quad(density, a, b, limit=200)[0] for a, b in zip(edges[:-1], edges[1:]))
    assert total == pytest.approx(1.0, abs=1e-7)


@pytest.mark.parametrize("pi, tau0, tau1", PRIOR_PARAMS)
def test_spike_slab_samples_follow_mixture(pi, tau0, tau1):
    """Samples have mean 0 and variance pi tau1^2 + (1-pi) tau0^2 (MC), and pass a KS test against the mixture CDF."""
    d = SpikeAndSlab(t(pi), t(tau0), t(tau1))
    n = 200_000
    w = d.sample((n,))
    assert w.shape == (n,)
    variance = pi * tau1**2 + (1 - pi) * tau0**2
    assert w.mean().item() == pytest.approx(0.0, abs=5 * math.sqrt(variance / n))
    second = w**2
    assert second.mean().item() == pytest.approx(variance, abs=5 * second.std().item() / math.sqrt(n))
    torch.testing.assert_close(d.variance, t(variance))
    assert d.mean.item() == 0.0

    def cdf(x):
        return pi * stats.norm.cdf(x / tau1) + (1 - pi) * stats.norm.cdf(x / tau0)

    assert stats.kstest(w[:20_000].numpy(), cdf).pvalue > 1e-3


@pytest.mark.parametrize(
    "pi_shape, tau0_shape, tau1_shape, batch_shape",
    [((), (), (), ()), ((3, 1), (), (4,), (3, 4)), ((2,), (2,), (1,), (2,)), ((), (5,), (), (5,))],
)
def test_spike_slab_batch_shapes_broadcast(pi_shape, tau0_shape, tau1_shape, batch_shape):
    """Parameters broadcast to one batch shape; log_prob matches the elementwise mixture formula; samples have it."""
    pi = 0.1 + 0.8 * torch.rand(pi_shape, dtype=DOUBLE)
    tau0 = 0.05 + 0.1 * torch.rand(tau0_shape, dtype=DOUBLE)
    tau1 = 1.0 + torch.rand(tau1_shape, dtype=DOUBLE)
    d = SpikeAndSlab(pi, tau0, tau1)
    assert d.batch_shape == torch.Size(batch_shape) and d.event_shape == ()
    assert d.sample((7,)).shape == (7, *batch_shape)
    value = torch.randn(batch_shape, dtype=DOUBLE)
    pi_b, tau0_b, tau1_b = torch.broadcast_tensors(pi, tau0, tau1)
    slab, spike = Normal(0.0, tau1_b).log_prob(value).exp(), Normal(0.0, tau0_b).log_prob(value).exp()
    expected = torch.log(pi_b * slab + (1 - pi_b) * spike)
    torch.testing.assert_close(d.log_prob(value), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("batch_shape", [(3,), (2, 3), (4, 1, 2)])
def test_spike_slab_expand_and_to_event(batch_shape):
    """expand() copies the scalar prior over a batch; to_event() sums log_prob over the reinterpreted dims."""
    base = SpikeAndSlab(t(0.3), t(0.1), t(2.0))
    expanded = base.expand(batch_shape)
    assert expanded.batch_shape == torch.Size(batch_shape)
    value = torch.randn(batch_shape, dtype=DOUBLE)
    elementwise = torch.stack([base.log_prob(v) for v in value.flatten()]).view(batch_shape)
    torch.testing.assert_close(expanded.log_prob(value), elementwise)
    assert expanded.sample().shape == torch.Size(batch_shape)
    event = expanded.to_event(len(batch_shape))
    assert event.batch_shape == () and event.event_shape == torch.Size(batch_shape)
    torch.testing.assert_close(event.log_prob(value), elementwise.sum())
    # The expanded prior keeps the parameters of the base.
    assert torch.all(expanded.pi == 0.3) and torch.all(expanded.tau0 == 0.1) and torch.all(expanded.tau1 == 2.0)


# SpikeSlabPosterior as a distribution.


@pytest.mark.parametrize("shape", [(), (3,), (4, 5)])
def test_posterior_rsample_moments_and_gradient(shape):
    """rsample has mean m and std s (MC), and d w / d m = 1, d w / d s = (w - m) / s (reparameterisation)."""
    loc = torch.randn(shape, dtype=DOUBLE, requires_grad=True)
    scale = (0.1 + torch.rand(shape, dtype=DOUBLE)).requires_grad_()
    q = SpikeSlabPosterior(loc, scale, torch.zeros(shape, dtype=DOUBLE))
    n = 100_000
    w = q.rsample((n,))
    assert w.shape == (n, *shape)
    se_mean = scale.detach() / math.sqrt(n)
    assert torch.all((w.detach().mean(0) - loc.detach()).abs() <= 5 * se_mean)
    se_std = scale.detach() / math.sqrt(2 * n)
    assert torch.all((w.detach().std(0) - scale.detach()).abs() <= 5 * se_std)

    draw = q.rsample()
    grad_loc, grad_scale = torch.autograd.grad(draw.sum(), [loc, scale])
    torch.testing.assert_close(grad_loc, torch.ones(shape, dtype=DOUBLE))
    torch.testing.assert_close(grad_scale, ((draw - loc) / scale).detach())


@pytest.mark.parametrize("shape", [(), (3,), (2, 4)])
def test_posterior_density_entropy_and_probs(shape):
    """log_prob, entropy, mean and variance are those of N(m, s^2); probs is sigmoid(logits)."""
    loc, scale, logits = _random_posterior(shape, 1.0, (0.1, 2.0))
    q = SpikeSlabPosterior(loc, scale, logits)
    reference = Normal(loc, scale)
    value = torch.randn(shape, dtype=DOUBLE)
    torch.testing.assert_close(q.log_prob(value), reference.log_prob(value))
    torch.testing.assert_close(q.entropy(), reference.entropy())
    torch.testing.assert_close(q.mean, loc)
    torch.testing.assert_close(q.variance, scale**2)
    torch.testing.assert_close(q.probs, 1 / (1 + torch.exp(-logits)))


def test_posterior_broadcast_expand_and_to_event():
    """Scalar logits broadcast against vector loc/scale; expand() and to_event() give the right shapes and log_prob."""
    q = SpikeSlabPosterior(torch.zeros(3, dtype=DOUBLE), t(1.0), t(0.5))
    assert q.batch_shape == (3,) and q.logits.shape == (3,)
    expanded = q.expand((2, 3))
    assert expanded.batch_shape == (2, 3)
    assert expanded.rsample().shape == (2, 3)
    value = torch.randn(2, 3, dtype=DOUBLE)
    torch.testing.assert_close(expanded.to_event(2).log_prob(value), Normal(0.0, 1.0).log_prob(value).sum().double())


# Validation.


@pytest.mark.parametrize(
    "pi, tau0, tau1",
    [
        (1.5, 0.1, 1.0),
        (0.0, 0.1, 1.0),
        (1.0, 0.1, 1.0),
        (-0.2, 0.1, 1.0),
        (0.5, -0.1, 1.0),
        (0.5, 0.1, 0.0),
    ],
)
def test_spike_slab_invalid_parameters_raise(pi, tau0, tau1):
    """With Pyro validation on, parameters outside pi in (0,1), tau > 0 raise ValueError."""
    with pytest.raises(ValueError):
        SpikeAndSlab(t(pi), t(tau0), t(tau1))


def test_posterior_invalid_scale_raises():
    """A non-positive variational scale raises ValueError under validation."""
    with pytest.raises(ValueError):
        SpikeSlabPosterior(t(0.0), t(-1.0), t(0.0))


def test_spike_slab_log_prob_validates_value():
    """log_prob of a NaN is rejected under validation (support is the real line)."""
    with pytest.raises(ValueError):
        SpikeAndSlab(t(0.5), t(0.1), t(1.0)).log_prob(t(float("nan")))


# The prior policy that places SpikeAndSlab on parameters.


@pytest.mark.parametrize("shape", [(3,), (4, 2), (2, 3, 5)])
def test_prior_policy_shapes_and_density(shape):
    """SpikeSlabPrior gives one site distribution with event shape param.shape and the summed mixture density."""
    pi, tau0, tau1 = 0.3, 0.05, 1.5
    param = torch.zeros(shape, dtype=DOUBLE)
    d = SpikeSlabPrior(pi=pi, tau0=tau0, tau1=tau1).distribution("layer.weight", param)
    assert d.batch_shape == () and d.event_shape == torch.Size(shape)
    value = torch.randn(shape, dtype=DOUBLE)
    slab, spike = Normal(t(0.0), t(tau1)).log_prob(value).exp(), Normal(t(0.0), t(tau0)).log_prob(value).exp()
    density = pi * slab + (1 - pi) * spike
    torch.testing.assert_close(d.log_prob(value), density.log().sum(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "options", [{"pi": 0.0}, {"pi": 1.0}, {"tau0": 1.0, "tau1": 1.0}, {"tau0": 2.0, "tau1": 1.0}, {"tau0": 0.0}]
)
def test_prior_policy_rejects_invalid(options):
    """pi outside (0, 1) or not 0 < tau0 < tau1 raises ConfigError (a ValueError)."""
    with pytest.raises(ConfigError):
        SpikeSlabPrior(**options)


def test_penalty_gradient_matches_paper_eq_3_15():
    """dR/d(sigma^2) at fixed p equals eq. 3.15: (p/tau1^2 + (1-p)/tau0^2 - 1/sigma^2) / 2 (autograd vs closed form)."""
    loc = t([0.3, -0.7, 0.0])
    variance = t([0.04, 0.5, 0.01]).requires_grad_()
    logits = t([-1.0, 0.5, 2.0])
    pi, tau0, tau1 = t(0.4), t(0.2), t(1.3)
    penalty = spike_slab_penalty(loc, variance.sqrt(), logits, pi, tau0, tau1).sum()
    (grad,) = torch.autograd.grad(penalty, variance)
    p = torch.sigmoid(logits)
    expected = 0.5 * (p / tau1**2 + (1 - p) / tau0**2 - 1 / variance.detach())
    torch.testing.assert_close(grad, expected)
    # And with respect to m: m (p/tau1^2 + (1-p)/tau0^2).
    loc = loc.clone().requires_grad_()
    penalty = spike_slab_penalty(loc, variance.detach().sqrt(), logits, pi, tau0, tau1).sum()
    (grad_m,) = torch.autograd.grad(penalty, loc)
    torch.testing.assert_close(grad_m, loc.detach() * (p / tau1**2 + (1 - p) / tau0**2))
