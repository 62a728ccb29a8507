"""The group horseshoe (Louizos et al. 2017): its KL against Monte Carlo over weights and every scale
variable, the KLs of its log-normal scales against numerical integration, and its draws' half-Cauchy
scales against the half-Cauchy's quantiles."""

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats
from torch.distributions import kl_divergence

from bayesprune.core.group_horseshoe import (
    GroupHorseshoe,
    GroupHorseshoePosterior,
    kl_lognormal_gamma,
    kl_lognormal_inverse_gamma,
)

GLOBAL = 0.3
SHAPES = [(3, 4), (5,), (2, 3, 2, 2)]


def posterior(shape, seed):
    generator = torch.Generator().manual_seed(seed)

    def normal(size, scale=1.0, shift=0.0):
        return torch.randn(size, generator=generator, dtype=torch.float64) * scale + shift

    rows = (2, shape[0]) + (1,) * (len(shape) - 1)
    return GroupHorseshoePosterior(
        normal(shape, 0.3),
        normal(shape, 0.02).abs() + 0.05,
        normal(rows, 0.5),
        normal(rows, 0.1).abs() + 0.2,
        normal((2,), 0.5, -1.0),
        normal((2,), 0.1).abs() + 0.2,
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_the_kl_is_the_monte_carlo_kl_over_weights_unit_scales_and_the_global_scale(shape):
    q, p = posterior(shape, 0), GroupHorseshoe(torch.tensor(GLOBAL, dtype=torch.float64), shape)
    exact = float(kl_divergence(q, p).sum())
    rng, draws = np.random.default_rng(1), 100_000
    n = shape[0]
    loc, scale = q.loc.numpy().reshape(n, -1), q.scale.numpy().reshape(n, -1)
    row_locs, row_scales = q.row_locs.numpy().reshape(2, n, 1), q.row_scales.numpy().reshape(2, n, 1)
    g_locs, g_scales = q.global_locs.numpy(), q.global_scales.numpy()
    log_rows = row_locs + row_scales * rng.standard_normal((draws, 2, n, 1))  # log a_g, log b_g
    log_global = g_locs + g_scales * rng.standard_normal((draws, 2))
    w = loc + scale * rng.standard_normal((draws, *loc.shape))
    sd = np.exp(0.5 * log_rows.sum(1) + 0.5 * log_global.sum(1)[:, None, None])  # z_g s
    log_q = (
        stats.norm.logpdf(w, loc, scale).sum((1, 2))
        + (stats.norm.logpdf(log_rows, row_locs, row_scales) - log_rows).sum((1, 2, 3))  # log-normal densities
        + (stats.norm.logpdf(log_global, g_locs, g_scales) - log_global).sum(1)
    )
    a, b = np.exp(log_rows[:, 0]), np.exp(log_rows[:, 1])
    ga, gb = np.exp(log_global[:, 0]), np.exp(log_global[:, 1])
    log_p = (
        stats.norm.logpdf(w, 0, sd).sum((1, 2))
        + (stats.gamma.logpdf(a, 0.5, scale=1.0) + stats.invgamma.logpdf(b, 0.5, scale=1.0)).sum((1, 2))
        + stats.gamma.logpdf(ga, 0.5, scale=GLOBAL**2)
        + stats.invgamma.logpdf(gb, 0.5, scale=1.0)
    )
    terms = log_q - log_p
    assert exact == pytest.approx(terms.mean(), abs=4 * terms.std() / math.sqrt(draws))


@pytest.mark.parametrize(("loc", "scale"), [(0.0, 1.0), (-2.0, 0.3), (1.5, 0.7)])
def test_the_log_normal_kls_are_the_numerical_integrals(loc, scale):
    q = stats.lognorm(scale, scale=math.exp(loc))
    for closed, prior in (
        (
            kl_lognormal_gamma(*(torch.tensor(v, dtype=torch.float64) for v in (loc, scale, 4.0))),
            stats.gamma(0.5, scale=0.25),
        ),
        (
            kl_lognormal_inverse_gamma(*(torch.tensor(v, dtype=torch.float64) for v in (loc, scale))),
            stats.invgamma(0.5),
        ),
    ):

        def integrand(u, prior=prior):  # over u = log x, where q is the normal N(loc, scale²)
            return stats.norm.pdf(u, loc, scale) * (q.logpdf(math.exp(u)) - prior.logpdf(math.exp(u)))

        value, _ = integrate.quad(integrand, loc - 12 * scale, loc + 12 * scale, limit=200)
        assert float(closed) == pytest.approx(value, rel=1e-6)


def test_a_draw_has_half_cauchy_unit_scales():
    torch.manual_seed(0)
    prior = GroupHorseshoe(torch.tensor(GLOBAL, dtype=torch.float64), (4000, 200))
    draws = prior.sample((2,))
    unit_sd = draws.std(dim=-1) / draws.std(dim=-1).median(dim=-1, keepdim=True).values  # z_g over the median z
    quartile = unit_sd.quantile(0.75, dim=-1)
    assert quartile.numpy() == pytest.approx(math.tan(3 * math.pi / 8), rel=0.05)  # C+(0, 1): Q3 / median
