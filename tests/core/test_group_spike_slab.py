"""The unit-level spike-and-slab: its registered KL against Monte Carlo, its log density against the mixture
written out with scipy, and its closed-form p* against a numerical minimisation of the KL."""

import math

import numpy as np
import pytest
import torch
from scipy import optimize, stats
from scipy.special import logsumexp
from torch.distributions import kl_divergence

from bayesprune.core.distributions import SpikeAndSlab, SpikeSlabPosterior
from bayesprune.core.group_spike_slab import GroupSpikeAndSlab, GroupSpikeSlabPosterior, group_inclusion_logits

PI, TAU0, TAU1 = 0.3, 0.05, 1.5
SHAPES = [(3, 4), (5,), (2, 3, 2, 2)]


def prior(shape):
    return GroupSpikeAndSlab(*(torch.tensor(v, dtype=torch.float64) for v in (PI, TAU0, TAU1)), torch.Size(shape))


def posterior(shape, generator):
    loc = torch.randn(shape, generator=generator, dtype=torch.float64) * 0.3
    scale = torch.rand(shape, generator=generator, dtype=torch.float64) * 0.2 + 0.02
    row_logits = torch.randn((shape[0],) + (1,) * (len(shape) - 1), generator=generator, dtype=torch.float64) * 2
    return GroupSpikeSlabPosterior(loc, scale, row_logits)


def rows(values: np.ndarray) -> np.ndarray:
    return values.reshape(values.shape[0], -1)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_kl_is_the_monte_carlo_kl_of_the_joint_over_weights_and_unit_indicators(shape):
    generator = torch.Generator().manual_seed(0)
    q, p = posterior(shape, generator), prior(shape)
    exact = float(kl_divergence(q, p).sum())
    draws = 200_000
    rng = np.random.default_rng(1)
    loc, scale = rows(q.loc.numpy()), rows(q.scale.numpy())
    prob = torch.sigmoid(q.row_logits).numpy().reshape(-1, 1)
    z = rng.random((draws, *prob.shape)) < prob  # one indicator per row
    w = loc + scale * rng.standard_normal((draws, *loc.shape))
    log_q = stats.norm.logpdf(w, loc, scale).sum(-1) + np.where(z, np.log(prob), np.log1p(-prob))[..., 0]
    tau = np.where(z, TAU1, TAU0)
    log_p = stats.norm.logpdf(w, 0, tau).sum(-1) + np.where(z, math.log(PI), math.log1p(-PI))[..., 0]
    terms = (log_q - log_p).sum(-1)
    assert exact == pytest.approx(terms.mean(), abs=4 * terms.std() / math.sqrt(draws))


@pytest.mark.parametrize("shape", SHAPES)
def test_the_log_density_is_each_rows_two_component_mixture(shape):
    w = torch.randn(shape, dtype=torch.float64) * 0.5
    values = rows(w.numpy())
    slab = math.log(PI) + stats.norm.logpdf(values, 0, TAU1).sum(-1)
    spike = math.log1p(-PI) + stats.norm.logpdf(values, 0, TAU0).sum(-1)
    expected = logsumexp(np.stack([slab, spike]), axis=0).sum()
    assert float(prior(shape).log_prob(w).sum()) == pytest.approx(expected, rel=1e-10)


def test_the_closed_form_inclusion_probability_minimises_the_kl_of_each_unit():
    generator = torch.Generator().manual_seed(2)
    shape = (4, 6)
    # weights near the spike's boundary, so that p* lies inside (0, 1): logits -16 to -3 here
    loc = torch.randn(shape, generator=generator, dtype=torch.float64) * 0.12
    q = GroupSpikeSlabPosterior(loc, torch.full(shape, 0.04, dtype=torch.float64), torch.zeros(shape[0], 1))
    closed = group_inclusion_logits(q.loc, q.scale, *prior(shape).hyperparameters).flatten()
    for row in range(shape[0]):

        def kl(logit, row=row):
            q_row = GroupSpikeSlabPosterior(q.loc[row : row + 1], q.scale[row : row + 1], torch.tensor([[logit]]))
            return float(kl_divergence(q_row, prior((1, shape[1]))).sum())

        numerical = optimize.minimize_scalar(kl, bracket=(-30.0, 5.0), tol=1e-12).x
        assert float(closed[row]) == pytest.approx(numerical, abs=1e-4)


def test_a_unit_of_one_weight_is_the_per_weight_spike_and_slab():
    loc, scale = torch.randn(7, dtype=torch.float64), torch.rand(7, dtype=torch.float64) + 0.1
    hyper = [torch.tensor(v, dtype=torch.float64) for v in (PI, TAU0, TAU1)]
    logits = group_inclusion_logits(loc, scale, *hyper)
    per_weight = SpikeAndSlab(*hyper).expand((7,))
    group = kl_divergence(GroupSpikeSlabPosterior(loc, scale, logits), prior((7,)))
    assert torch.allclose(group, kl_divergence(SpikeSlabPosterior(loc, scale, logits), per_weight))
    w = torch.randn(7, dtype=torch.float64)
    assert torch.allclose(prior((7,)).log_prob(w), per_weight.log_prob(w))


def test_a_draw_puts_whole_units_in_the_spike_or_in_the_slab():
    torch.manual_seed(0)
    draw = prior((400, 50)).sample()
    row_scale = draw.std(dim=1)
    in_slab = row_scale > 0.5  # a slab row's spread is near 1.5, a spike row's near 0.05
    assert ((row_scale < 0.1) | in_slab).all()
    assert in_slab.float().mean().item() == pytest.approx(PI, abs=0.07)
