"""Tests of bayesprune.core.reparameterization.LocalReparameterization and its use in AnalyticKLELBO.

Oracles: Monte Carlo over explicit weight draws W ~ N(m, s^2) pushed through plain ``F.linear`` /
``F.conv2d`` (the weight-sampling estimator), and Monte-Carlo averages of the loss without the trick.
"""

import math

import pyro
import pytest
import torch
import torch.nn.functional as F
from pyro.poutine.messenger import Messenger
from torch.distributions import Normal

from bayesprune.core.objectives import AnalyticKLELBO
from bayesprune.core.reparameterization import LocalReparameterization
from bayesprune.guides import SpikeSlabGuide
from bayesprune.models import BayesianNetwork, Categorical, Gaussian, mlp
from bayesprune.models.priors import SpikeSlabPrior

DOUBLE = torch.float64


def gaussian(shape, generator):
    """A Normal posterior with random mean and scale in [0.1, 0.6]."""
    loc = torch.randn(shape, generator=generator, dtype=DOUBLE)
    scale = 0.1 + 0.5 * torch.rand(shape, generator=generator, dtype=DOUBLE)
    return Normal(loc, scale)


def assert_same_gaussian_marginals(lrt, weights, sigmas=5.0):
    """Compare per-element means and variances of two samples (first dim = draws) within MC standard errors."""
    n1, n2 = lrt.shape[0], weights.shape[0]
    mean1, mean2 = lrt.mean(0), weights.mean(0)
    var1, var2 = lrt.var(0), weights.var(0)
    se_mean = (var1 / n1 + var2 / n2).sqrt()
    assert torch.all((mean1 - mean2).abs() <= sigmas * se_mean), (mean1 - mean2).abs().max()
    # Both estimators are exactly Gaussian per element: Var(sample variance) = 2 var^2 / (n - 1).
    se_var = (2 * var1**2 / (n1 - 1) + 2 * var2**2 / (n2 - 1)).sqrt()
    assert torch.all((var1 - var2).abs() <= sigmas * se_var), ((var1 - var2).abs() / se_var).max()


@pytest.mark.parametrize("batch, fan_in, fan_out, with_bias", [(4, 5, 3, True), (2, 7, 1, True), (3, 4, 6, False)])
def test_linear_matches_weight_sampling(batch, fan_in, fan_out, with_bias):
    """F.linear under the mode has the per-output mean and variance of F.linear with sampled weights."""
    g = torch.Generator().manual_seed(fan_in)
    x = torch.randn(batch, fan_in, generator=g, dtype=DOUBLE)
    q_weight = gaussian((fan_out, fan_in), g)
    q_bias = gaussian((fan_out,), g) if with_bias else None
    weight = q_weight.sample()
    bias = q_bias.sample() if with_bias else None
    posteriors = {id(weight): q_weight} | ({id(bias): q_bias} if with_bias else {})

    draws = 20_000
    with LocalReparameterization(posteriors):
        repeated_calls = torch.stack([F.linear(x, weight, bias) for _ in range(2000)])
        one_call = F.linear(x.repeat(draws, 1), weight, bias).view(draws, batch, fan_out)
    assert repeated_calls.shape == (2000, batch, fan_out)
    sampled_w = q_weight.sample((draws,))
    sampled_b = q_bias.sample((draws,)) if with_bias else None
    explicit = torch.stack(
        [F.linear(x, sampled_w[k], None if sampled_b is None else sampled_b[k]) for k in range(draws)]
    )
    assert_same_gaussian_marginals(one_call, explicit)
    assert_same_gaussian_marginals(repeated_calls, explicit)


def test_a_sampled_convolution_is_refused_and_why():
    """Output positions sharing a kernel are correlated under weight sampling; independent draws per
    position (what the trick would do) lose that: the variance of the sum over positions differs."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1, 5, 5, generator=g, dtype=DOUBLE)
    q_weight = gaussian((1, 1, 3, 3), g)
    weight = q_weight.sample()
    with LocalReparameterization({id(weight): q_weight}), pytest.raises(ValueError, match="not exact for conv2d"):
        F.conv2d(x, weight)
    draws = 20_000
    kernels = q_weight.sample((draws,)).reshape(draws, 1, 3, 3)
    joint = F.conv2d(x, kernels).sum((-2, -1)).squeeze(0)  # weight sampling: one kernel for all 9 positions
    mean = F.conv2d(x, q_weight.loc)
    std = F.conv2d(x**2, q_weight.scale**2).sqrt()
    independent = (mean + std * torch.randn((draws, 1, 1, 3, 3), generator=g, dtype=DOUBLE)).sum((-2, -1)).flatten()
    ratio = joint.var() / independent.var()
    assert abs(ratio.item() - 1) > 10 * math.sqrt(4 / draws)


def test_conv_module_keyword_bias_and_module_path():
    """nn.Linear modules (positional bias) and F.linear(bias=...) (keyword) are both intercepted."""
    g = torch.Generator().manual_seed(5)
    linear = torch.nn.Linear(3, 2).double()
    q_weight = Normal(linear.weight.detach().clone(), torch.full((2, 3), 0.3, dtype=DOUBLE))
    x = torch.randn(4, 3, generator=g, dtype=DOUBLE)
    posteriors = {id(linear.weight): q_weight}
    draws = 20_000
    with torch.no_grad(), LocalReparameterization(posteriors):
        module_out = linear(x.repeat(draws, 1)).view(draws, 4, 2)
        keyword_out = F.linear(x.repeat(draws, 1), linear.weight, bias=linear.bias).view(draws, 4, 2)
    expected_mean = F.linear(x, linear.weight, linear.bias).detach()
    expected_var = F.linear(x**2, q_weight.scale**2)
    for out in (module_out, keyword_out):
        se = (expected_var / draws).sqrt()
        assert torch.all((out.mean(0) - expected_mean).abs() <= 5 * se)
        assert torch.all((out.var(0) - expected_var).abs() <= 5 * expected_var * math.sqrt(2 / draws))


def test_unmapped_tensors_pass_through_unchanged():
    """Weights not in the map, and other functions, give bit-identical results inside and outside the mode."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, generator=g)
    mapped = torch.randn(2, 3, generator=g)
    other_w, other_b = torch.randn(5, 3, generator=g), torch.randn(5, generator=g)
    kernel, image = torch.randn(2, 1, 3, 3, generator=g), torch.randn(1, 1, 5, 5, generator=g)
    posteriors = {id(mapped): Normal(mapped, torch.ones_like(mapped))}
    with LocalReparameterization(posteriors):
        linear_out = F.linear(x, other_w, other_b)
        conv_out = F.conv2d(image, kernel)
        matmul_out = x @ other_w.T
        relu_out = torch.relu(x)
        noisy = F.linear(x, mapped)
    assert torch.equal(linear_out, F.linear(x, other_w, other_b))
    assert torch.equal(conv_out, F.conv2d(image, kernel))
    assert torch.equal(matmul_out, x @ other_w.T)
    assert torch.equal(relu_out, torch.relu(x))
    # The mapped weight is intercepted: its output is not the deterministic product.
    assert not torch.equal(noisy, F.linear(x, mapped))


def test_deterministic_bias_adds_no_variance():
    """A mapped weight with an unmapped bias: the bias enters the mean only (variance from the weight alone)."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 4, generator=g, dtype=DOUBLE)
    q_weight = gaussian((2, 4), g)
    weight, bias = q_weight.sample(), torch.tensor([5.0, -5.0], dtype=DOUBLE)
    draws = 20_000
    with LocalReparameterization({id(weight): q_weight}):
        out = F.linear(x.repeat(draws, 1), weight, bias).view(draws, 3, 2)
    sampled = q_weight.sample((draws,))
    explicit = torch.einsum("bi,koi->kbo", x, sampled) + bias
    assert_same_gaussian_marginals(out, explicit)


# The trick inside the objective.


class ObservedRecorder(Messenger):
    """Records the distribution of every observed site."""

    def __init__(self):
        super().__init__()
        self.observed = []

    def _postprocess_message(self, msg):
        if msg["type"] == "sample" and msg["is_observed"]:
            self.observed.append(msg["fn"])


def tiny_problem(likelihood, n=16, init_scale=0.3):
    outputs = 3 if likelihood == "categorical" else 1
    net = mlp((2,), outputs, hidden=[3]).double()
    lik = Categorical(n) if likelihood == "categorical" else Gaussian(n, scale=0.5)
    model = BayesianNetwork(net, SpikeSlabPrior(pi=0.5, tau0=0.05, tau1=1.0), lik)
    guide = SpikeSlabGuide(model, init_scale=init_scale)
    x = torch.randn(n, 2, dtype=DOUBLE)
    y = torch.randint(0, 3, (n,)) if likelihood == "categorical" else torch.randn(n, dtype=DOUBLE)
    return model, guide, x, y


@pytest.mark.parametrize("likelihood", ["categorical", "gaussian"])
def test_elbo_expected_loss_is_unchanged_by_local_reparameterization(likelihood):
    """E[loss] with local_reparameterization=True equals E[loss] without it (MC averages over many calls)."""
    model, guide, x, y = tiny_problem(likelihood)
    plain, local = AnalyticKLELBO(), AnalyticKLELBO(local_reparameterization=True)
    calls = 300
    with_trick = torch.tensor([local.loss(model, guide, x, y) for _ in range(calls)], dtype=DOUBLE)
    without = torch.tensor([plain.loss(model, guide, x, y) for _ in range(calls)], dtype=DOUBLE)
    error = math.sqrt(with_trick.var().item() / calls + without.var().item() / calls)
    assert with_trick.mean().item() == pytest.approx(without.mean().item(), abs=4 * error)


def test_elbo_local_reparameterization_samples_preactivations_per_example():
    """With the trick, identical inputs get independent outputs within one draw; without it they coincide."""
    model, guide, _, _ = tiny_problem("gaussian")
    x = torch.ones(8, 2, dtype=DOUBLE)
    y = torch.zeros(8, dtype=DOUBLE)
    for local, independent in [(False, False), (True, True)]:
        with ObservedRecorder() as recorder:
            AnalyticKLELBO(local_reparameterization=local).loss(model, guide, x, y)
        means = recorder.observed[0].loc
        assert (means.std() > 1e-6) == independent, means


def test_elbo_kl_part_is_unchanged_by_local_reparameterization():
    """Only the likelihood is sampled differently: with a vanishing posterior scale both losses coincide."""
    model, guide, x, y = tiny_problem("categorical", init_scale=1e-7)
    pyro.set_rng_seed(1)
    plain = AnalyticKLELBO().loss(model, guide, x, y)
    pyro.set_rng_seed(1)
    local = AnalyticKLELBO(local_reparameterization=True).loss(model, guide, x, y)
    assert local == pytest.approx(plain, rel=1e-6)


@pytest.mark.parametrize("likelihood", ["categorical", "gaussian"])
def test_elbo_gradient_with_local_reparameterization_is_unbiased(likelihood):
    """The mean gradient wrt the guide means with the trick equals the mean gradient without it (MC)."""
    model, guide, x, y = tiny_problem(likelihood)
    guide(x, y)
    loc = pyro.param("loc").unconstrained()
    grads = {}
    for local in (False, True):
        elbo = AnalyticKLELBO(local_reparameterization=local)
        grads[local] = torch.stack(
            [torch.autograd.grad(elbo.differentiable_loss(model, guide, x, y), [loc])[0] for _ in range(200)]
        )
    error = (grads[False].var(0) / 200 + grads[True].var(0) / 200).sqrt()
    assert torch.all((grads[False].mean(0) - grads[True].mean(0)).abs() <= 5 * error + 1e-9)
