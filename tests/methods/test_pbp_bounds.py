"""PAC-Bayes bounds of paper 000 (Theorems 1-2, eqs. 4, 7, 13-16) against numpy/scipy, brute-force and simulation oracles."""

import itertools
import json
import math

import numpy as np
import pytest
import torch
from scipy.special import rel_entr

from bayesprune.methods.pbp.bounds import (
    certificate,
    kl_bernoulli,
    kl_inverse,
    kl_inverse_bound,
    linear_bound,
    pac_bayes_bound,
    sample_risk_bound,
)


def brute_kl_inverse(q: float, c: float, points: int = 10**6) -> tuple[float, float]:
    """The largest p of a grid of ``points`` + 1 values on [q, 1] with kl(q ‖ p) ≤ c (scipy's rel_entr
    takes 0 log 0 = 0), and the grid's spacing: the supremum lies in [p, p + spacing]."""
    p = np.linspace(q, 1, points + 1)
    kl = rel_entr(q, p) + rel_entr(1 - q, 1 - p)
    return float(p[kl <= c].max()), (1 - q) / points


def epsilon(kl: float, n: int, delta: float) -> float:
    """ε of eqs. 4 and 7, by hand."""
    return (kl + math.log(2 * math.sqrt(n) / delta)) / n


def test_kl_bernoulli_matches_the_direct_formula_inside_the_interval():
    rng = np.random.default_rng(0)
    q, p = rng.uniform(1e-6, 1 - 1e-6, size=(2, 1000))
    expected = q * np.log(q / p) + (1 - q) * np.log((1 - q) / (1 - p))
    assert np.allclose(kl_bernoulli(torch.from_numpy(q), torch.from_numpy(p)).numpy(), expected, rtol=1e-10, atol=1e-15)
    value = kl_bernoulli(0.3, 0.6)  # Python numbers: a 0-dim float64 tensor
    assert value.dtype == torch.float64 and value.dim() == 0
    assert float(value) == pytest.approx(0.3 * math.log(0.5) + 0.7 * math.log(0.7 / 0.4), rel=1e-14)


def test_kl_bernoulli_is_zero_at_q_equal_p_and_exact_at_the_ends():
    x = torch.tensor([0.0, 1e-9, 0.25, 0.5, 0.999, 1.0], dtype=torch.float64)
    assert torch.equal(kl_bernoulli(x, x), torch.zeros_like(x))
    p = np.array([0.0, 1e-3, 0.3, 0.7, 1.0])
    for q in (0.0, 1.0):
        expected = rel_entr(q, p) + rel_entr(1 - q, 1 - p)  # +inf where Bernoulli(p) loses q's support
        result = kl_bernoulli(torch.full((5,), q, dtype=torch.float64), torch.from_numpy(p)).numpy()
        assert np.allclose(result, expected, rtol=1e-14, atol=0)
    assert float(kl_bernoulli(0.0, 0.3)) == pytest.approx(-math.log(0.7), rel=1e-14)
    assert float(kl_bernoulli(1.0, 0.3)) == pytest.approx(-math.log(0.3), rel=1e-14)


def test_kl_bernoulli_gradients_are_the_closed_forms():
    q = torch.tensor([0.05, 0.3, 0.5, 0.9], dtype=torch.float64, requires_grad=True)
    p = torch.tensor([0.2, 0.3, 0.8, 0.4], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(kl_bernoulli, (q, p))
    kl_bernoulli(q, p).sum().backward()
    q0, p0 = q.detach(), p.detach()
    assert torch.allclose(q.grad, torch.log(q0 / p0) - torch.log((1 - q0) / (1 - p0)), rtol=1e-12)  # appendix C.2.1
    assert torch.allclose(p.grad, (p0 - q0) / (p0 * (1 - p0)), rtol=1e-12)


CASES = [(0.0, 0.01), (0.0, 2.0), (0.1, 0.05), (0.3, 0.5), (0.5, 1e-6), (0.9, 0.01), (0.02, 10.0), (0.999, 0.3)]


@pytest.mark.parametrize("q, c", CASES)
def test_kl_inverse_matches_a_brute_force_search(q, c):
    grid_max, spacing = brute_kl_inverse(q, c)
    result = float(kl_inverse(q, c))
    assert grid_max - 1e-12 <= result <= grid_max + spacing + 1e-12


def test_kl_inverse_at_the_edges():
    q = torch.tensor([0.0, 0.2, 0.7, 1.0], dtype=torch.float64)
    assert torch.allclose(kl_inverse(q, 0.0), q, rtol=0, atol=1e-12)  # c = 0: only p = q
    assert torch.equal(kl_inverse(1.0, 0.0), torch.tensor(1.0, dtype=torch.float64))  # q = 1: p = 1 costs nothing
    # No p < 1 exceeds c: for c this large 1 − p would be below float64's resolution.
    assert torch.equal(kl_inverse(q, 1000.0), torch.ones_like(q))
    assert torch.equal(kl_inverse(q, math.inf), torch.ones_like(q))


def test_kl_inverse_is_increasing_in_q_and_c_and_solves_kl_equal_c():
    q = torch.linspace(0, 1, 41, dtype=torch.float64)[:, None]
    c = torch.logspace(-6, 1, 36, dtype=torch.float64)[None, :]
    p = kl_inverse(q, c)
    assert p.shape == (41, 36)
    assert (p.diff(dim=0) >= -1e-12).all() and (p.diff(dim=1) >= -1e-12).all()
    assert (p >= q - 1e-12).all()
    inner = p < 0.999
    assert inner.sum() > 300
    assert torch.allclose(kl_bernoulli(q.expand_as(p), p)[inner], c.expand_as(p)[inner], rtol=1e-7, atol=1e-9)


def test_kl_inverse_refuses_values_outside_its_domain():
    with pytest.raises(ValueError, match="^q must"):
        kl_inverse(torch.tensor([0.5, 1.2]), 0.1)
    with pytest.raises(ValueError, match="^c must"):
        kl_inverse(0.5, -0.1)


def test_pac_bayes_bound_first_branch_small_risk():
    risk, kl, n, delta = 0.01, 5.0, 60000, 0.05
    eps = epsilon(kl, n, delta)
    first, second = eps + math.sqrt(eps * (eps + 2 * risk)), math.sqrt(eps / 2)
    assert first < second
    assert float(pac_bayes_bound(risk, kl, n=n, delta=delta)) == pytest.approx(risk + first, rel=1e-13)


def test_pac_bayes_bound_second_branch_large_risk():
    risk, kl, n, delta = 0.4, 50.0, 1000, 0.05
    eps = epsilon(kl, n, delta)
    first, second = eps + math.sqrt(eps * (eps + 2 * risk)), math.sqrt(eps / 2)
    assert second < first
    assert float(pac_bayes_bound(risk, kl, n=n, delta=delta)) == pytest.approx(risk + second, rel=1e-13)


@pytest.mark.parametrize("risk, kl, n", [(0.01, 5.0, 60000), (0.4, 50.0, 1000)])
def test_pac_bayes_bound_gradients_match_finite_differences(risk, kl, n):
    r, k = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (risk, kl))
    pac_bayes_bound(r, k, n=n, delta=0.05).backward()
    h = 1e-6

    def bound(a, b):
        return float(pac_bayes_bound(a, b, n=n, delta=0.05))

    assert float(r.grad) == pytest.approx((bound(risk + h, kl) - bound(risk - h, kl)) / (2 * h), rel=1e-6)
    assert float(k.grad) == pytest.approx((bound(risk, kl + h) - bound(risk, kl - h)) / (2 * h), rel=1e-6)


@pytest.mark.parametrize("risk, kl, n", [(0.0, 10.0, 5000), (0.03, 200.0, 30000), (0.35, 20.0, 500)])
def test_kl_inverse_bound_matches_a_brute_force_search(risk, kl, n):
    grid_max, spacing = brute_kl_inverse(risk, epsilon(kl, n, 0.05))
    result = float(kl_inverse_bound(risk, kl, n=n, delta=0.05))
    assert grid_max - 1e-12 <= result <= grid_max + spacing + 1e-12


def test_theorem_2_is_below_both_relaxations_of_theorem_1():
    # Any p ≥ q with kl(q ‖ p) ≤ ε satisfies p − q ≤ √(ε/2) by Pinsker (kl ≥ 2(p − q)²), and
    # p ≤ q + ε + √(ε(ε + 2q)) by kl(q ‖ p) ≥ (p − q)²/(2p) (its derivative in p, (p − q)/(p(1 − p)),
    # dominates (p − q)(p + q)/(2p²) as (p + q)(1 − p) ≤ 2p), solved for p.
    risk = torch.linspace(0, 1, 21, dtype=torch.float64)
    for kl, n in itertools.product([0.0, 1.0, 10.0, 100.0, 1000.0], [100, 10000]):
        eps = epsilon(kl, n, 0.05)
        theorem_2 = kl_inverse_bound(risk, kl, n=n, delta=0.05)
        assert (theorem_2 <= risk + math.sqrt(eps / 2) + 1e-12).all()
        assert (theorem_2 <= pac_bayes_bound(risk, kl, n=n, delta=0.05) + 1e-12).all()


@pytest.mark.parametrize("draw", ["bernoulli", "beta"])
def test_sample_risk_bound_covers_the_mean_with_probability_one_minus_delta(draw):
    rng = np.random.default_rng(1)
    mean, samples, delta, repetitions = 0.3, 50, 0.1, 20000
    if draw == "bernoulli":
        risks = rng.binomial(1, mean, size=(repetitions, samples))
    else:
        risks = rng.beta(0.6, 1.4, size=(repetitions, samples))  # mean 0.6 / (0.6 + 1.4) = 0.3
    sample_means = torch.from_numpy(risks.mean(axis=1).astype(np.float64))
    bounds = sample_risk_bound(sample_means, samples=samples, delta=delta)
    misses = float((bounds < mean).double().mean())
    # Allowance: 3 standard errors of a frequency δ over the repetitions.
    assert misses <= delta + 3 * math.sqrt(delta * (1 - delta) / repetitions)
    assert float((sample_means < mean).double().mean()) > 0.3  # the means alone would miss often
    assert float(bounds.mean()) < 0.6


def test_sample_risk_bound_is_kl_inverse_at_log_2_over_delta_and_shrinks_with_samples():
    grid_max, spacing = brute_kl_inverse(0.2, math.log(2 / 0.05) / 100)
    assert grid_max - 1e-12 <= float(sample_risk_bound(0.2, samples=100, delta=0.05)) <= grid_max + spacing + 1e-12
    bounds = [float(sample_risk_bound(0.2, samples=m, delta=0.05)) for m in (10, 100, 1000, 10000, 100000)]
    assert all(a > b for a, b in zip(bounds, bounds[1:]))
    assert 0.2 < bounds[-1] < 0.2 + 0.01


def test_certificate_splits_delta_between_the_sampling_and_the_theorem_of_every_grid_setting():
    """A union over the grid's G settings of two events each (the Monte-Carlo bound, the theorem), δ/(2G)
    apiece: the sampling bound is kl⁻¹(R̂_m ‖ log(4G/δ)/m) in closed form, the theorem's ε has log(4G√n/δ)."""
    mean_risk, samples, kl, n, delta, grid_size = 0.02, 1000, 300.0, 30000, 0.05, 10
    cert = certificate(mean_risk=mean_risk, samples=samples, kl=kl, n=n, delta=delta, grid_size=grid_size)
    grid_max, spacing = brute_kl_inverse(mean_risk, math.log(4 * grid_size / delta) / samples)
    assert grid_max - 1e-12 <= cert.empirical_risk_bound <= grid_max + spacing + 1e-12
    assert cert.empirical_risk_bound > float(sample_risk_bound(mean_risk, samples=samples, delta=delta / 2)) + spacing
    theorem_delta = delta / (2 * grid_size)
    r, eps = cert.empirical_risk_bound, (kl + math.log(4 * grid_size * math.sqrt(n) / delta)) / n
    assert eps == pytest.approx(epsilon(kl, n, theorem_delta), rel=1e-14)
    assert cert.bound == pytest.approx(r + min(eps + math.sqrt(eps * (eps + 2 * r)), math.sqrt(eps / 2)), rel=1e-13)
    assert cert.bound_kl_inverse == float(kl_inverse_bound(r, kl, n=n, delta=theorem_delta))
    assert cert.empirical_risk <= cert.empirical_risk_bound <= cert.bound_kl_inverse <= cert.bound
    fields = cert.to_dict()
    assert fields == json.loads(json.dumps(fields))
    assert fields == {
        "bound": cert.bound,
        "bound_kl_inverse": cert.bound_kl_inverse,
        "empirical_risk": mean_risk,
        "empirical_risk_bound": cert.empirical_risk_bound,
        "kl": kl,
        "n": n,
        "delta": delta,
        "samples": samples,
        "grid_size": grid_size,
    }
    assert {type(value) for value in fields.values()} == {float, int}


def test_a_larger_grid_gives_a_larger_certificate():
    one, many = (certificate(mean_risk=0.05, samples=500, kl=torch.tensor(80.0), n=20000, grid_size=g) for g in (1, 50))
    assert many.bound > one.bound and many.bound_kl_inverse > one.bound_kl_inverse
    assert many.empirical_risk_bound > one.empirical_risk_bound  # the Monte-Carlo δ is split over the grid too


VALID = {"mean_risk": 0.1, "samples": 100, "kl": 10.0, "n": 1000, "delta": 0.05, "grid_size": 1}


@pytest.mark.parametrize(
    "name, value",
    [
        ("delta", 0.0),
        ("delta", 1.0),
        ("n", 0),
        ("samples", 0),
        ("grid_size", 0),
        ("mean_risk", 1.5),
        ("mean_risk", -0.1),
        ("kl", -1.0),
        ("n", 10.5),
    ],
)
def test_certificate_refuses_bad_inputs_by_name(name, value):
    with pytest.raises(ValueError, match=f"^{name} must"):
        certificate(**{**VALID, name: value})


def gibbs_risk(lam, w, X, Y):
    """Empirical Gibbs risk of independent masks b_i ~ Bernoulli(λ_i) on w under (f − y)²/2 (eqs. 1-2):
    ½[Σ_i λ_i w_i² Σ_ii + Σ_{i≠j} λ_i λ_j w_i w_j Σ_ij] − Σ_i λ_i w_i A_i + ‖Y‖²/(2M)."""
    M = X.shape[0]
    sigma, A, v = X.T @ X / M, X.T @ Y / M, lam * w
    cross = v @ sigma @ v - (v**2 * sigma.diagonal()).sum()
    return 0.5 * ((lam * w**2 * sigma.diagonal()).sum() + cross) - (v * A).sum() + (Y @ Y) / (2 * M)


def test_the_gibbs_risk_formula_is_the_average_over_all_masks():
    gen = torch.Generator().manual_seed(2)
    D, M = 6, 40
    X, Y = torch.randn(M, D, generator=gen, dtype=torch.float64), torch.randn(M, generator=gen, dtype=torch.float64)
    w, lam = torch.randn(D, generator=gen, dtype=torch.float64), torch.rand(D, generator=gen, dtype=torch.float64)
    masks = torch.tensor(list(itertools.product([0.0, 1.0], repeat=D)), dtype=torch.float64)  # all 2^D masks
    probabilities = (masks * lam + (1 - masks) * (1 - lam)).prod(dim=1)
    losses = ((X @ (masks * w).T - Y[:, None]) ** 2 / 2).mean(dim=0)
    assert float(gibbs_risk(lam, w, X, Y)) == pytest.approx(float(probabilities @ losses), rel=1e-12)


def test_gradient_flow_on_the_linear_bound_reaches_eq_16():
    gen = torch.Generator().manual_seed(3)
    D, M, zeta = 6, 50, 40.0
    X = torch.linalg.qr(torch.randn(M, D, generator=gen, dtype=torch.float64)).Q * math.sqrt(M)  # XᵀX/M = I
    w_true = torch.tensor([1.0, -0.8, 0.5, 0.3, -1.2, 0.9], dtype=torch.float64)
    Y = X @ w_true + 0.3 * torch.randn(M, generator=gen, dtype=torch.float64)
    w = w_true * torch.tensor([1.0, 1.3, -1.0, 2.5, 0.6, -0.5], dtype=torch.float64)  # "trained on S_P"
    lam0 = torch.tensor([0.3, 0.5, 0.7, 0.4, 0.6, 0.5], dtype=torch.float64)
    kappa, A = zeta / M, X.T @ Y / M
    delta = 0.5 * w**2 - w * A
    expected = lam0 / (lam0 + (1 - lam0) * torch.exp(delta / kappa))  # eq. 16
    assert ((expected > 0.05) & (expected < 0.95)).all() and (expected - lam0).abs().max() > 0.1

    lam = lam0.clone().requires_grad_(True)
    for _ in range(300):  # Euler steps of the gradient flow, eq. 15
        bound = linear_bound(gibbs_risk(lam, w, X, Y), kl_bernoulli(lam, lam0).sum(), n=M, zeta=zeta)
        (gradient,) = torch.autograd.grad(bound, lam)
        with torch.no_grad():
            lam -= 0.05 * gradient
        assert ((lam > 0) & (lam < 1)).all()
    assert torch.allclose(lam.detach(), expected, rtol=0, atol=1e-6)
