"""Hyper-priors of the unit gates (paper 004, section 4): π*(θ) against a numerical minimisation of eq. 10."""

import math

import pytest
import torch

from bayesprune.core.errors import ConfigError
from bayesprune.methods.unit_gates.hyperpriors import BetaHyperPrior, FlatteningHyperPrior, SALHyperPrior


def objective(prior, theta: float, u: float) -> float:
    """J(π) of eq. 10 at π = sigmoid(u), in float64."""
    u = torch.tensor(u, dtype=torch.float64)
    log_pi, log_not_pi = torch.nn.functional.logsigmoid(u), torch.nn.functional.logsigmoid(-u)
    kl = (1 - theta) * (math.log1p(-theta) - log_not_pi) + theta * (math.log(theta) - log_pi)
    return float(kl - prior.log_density(torch.sigmoid(u)))


def numerical_logit_optimum(prior, theta: float) -> float:
    """argmin of J over logit π in [logit ε1, logit(1 − ε2)] by golden-section search (J is unimodal)."""
    low, high = math.log(prior.eps1) - math.log1p(-prior.eps1), math.log1p(-prior.eps2) - math.log(prior.eps2)
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(200):
        a, b = high - ratio * (high - low), low + ratio * (high - low)
        if objective(prior, theta, a) <= objective(prior, theta, b):
            high = b
        else:
            low = a
    return (low + high) / 2


PRIORS = {
    "beta (Fig. 2)": BetaHyperPrior(0.9, 10.0, eps1=1e-4, eps2=1e-4),
    "beta (LeNet-300-100)": BetaHyperPrior(0.9, 1e10, eps1=1e-30, eps2=1e-30),
    "flattening (Fig. 2)": FlatteningHyperPrior(math.log(1e-2), eps1=1e-4, eps2=1e-4),
    "flattening (LeNet-300-100)": FlatteningHyperPrior(-25.0, eps1=1e-30, eps2=1e-30),
}


@pytest.mark.parametrize("name", PRIORS)
@pytest.mark.parametrize("theta", [1e-5, 0.003, 0.05, 0.2, 0.5, 0.8, 0.97, 0.9999])
def test_the_closed_form_optimum_minimises_eq_10(name, theta):
    prior = PRIORS[name]
    closed = float(prior.logit_optimal_pi(torch.tensor(theta, dtype=torch.float64)))
    numeric = numerical_logit_optimum(prior, theta)
    # J is flat near its minimum: compare the objective values, and the arguments where J is curved.
    assert objective(prior, theta, closed) <= objective(prior, theta, numeric) + 1e-9
    assert closed == pytest.approx(numeric, abs=1e-3)


def test_the_flattening_term_is_minus_log_gamma_on_its_flat_part_and_beta_grows_with_beta():
    theta = torch.tensor([0.01, 0.3, 0.7, 0.99])
    assert torch.allclose(PRIORS["flattening (LeNet-300-100)"].theta_gradient(theta), torch.full((4,), 25.0))
    # Beta: log(θ(β − θ) / ((1 − θ)(θ + α − 1))) of eq. 27 in its middle case.
    prior = PRIORS["beta (Fig. 2)"]
    t = theta[1:3].double()
    expected = torch.log(t * (10 - t) / ((1 - t) * (t - 0.1)))
    assert torch.allclose(prior.theta_gradient(t), expected)


def test_sal_is_the_derivative_of_minus_log_beta_at_pi_equal_theta():
    prior = SALHyperPrior()
    theta = torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64, requires_grad=True)
    (-prior.log_density(theta)).sum().backward()
    assert torch.allclose(prior.theta_gradient(theta.detach()), theta.grad)


def test_bad_hyper_parameters_are_refused_by_name():
    with pytest.raises(ConfigError, match="log_gamma must be negative"):
        FlatteningHyperPrior(0.5, eps1=1e-4, eps2=1e-4)
    with pytest.raises(ConfigError, match="beta must be above 1"):
        BetaHyperPrior(0.9, 0.5, eps1=1e-4, eps2=1e-4)


def test_every_packaged_flattening_config_has_eq_31s_flat_term_on_the_whole_range_theta_is_clipped_to():
    """Eq. 31: the Flattening term is −log γ for θ in (θ1, θ2), θ1 = ε1/(ε1 + γ(1 − ε1)), and the paper
    picks ε1 and ε2 so that θ1 and θ2 are as close to 0 and 1 as desired (section 4.2). With LeNet-5's
    log γ = −100 and ε1 = 1e-30 > γ, θ1 is about 1: every θ is in the lower case, π* = ε1, and the
    term is logit θ + 69 (62 to 83 over [θ_l, θ_h]), a weaker push than the paper's 100."""
    from bayesprune.pipeline.config import load_config, packaged_configs

    checked = []
    for name in packaged_configs():
        config = load_config(name)
        options = config.method_options
        if config.method != "unit-gates" or options.hyperprior != "flattening":
            continue
        theta = torch.tensor([options.theta_low, options.theta_tol, 0.5, options.theta_high], dtype=torch.float64)
        term = options.hyper_prior().theta_gradient(theta)
        torch.testing.assert_close(term, torch.full_like(term, -options.log_gamma), msg=name)
        checked.append(name)
    assert "unit-gates-lenet5" in checked and "unit-gates-lenet300" in checked


def test_a_fit_under_a_flattening_prior_whose_flat_part_misses_part_of_the_clipped_range_is_refused_naming_eps1():
    """Refused before a fit (the CLI's case is in test_bad_inputs.py); the options themselves still
    build, so that a finished run's config from before the check reads back."""
    from bayesprune.methods.unit_gates import UnitGatesOptions

    UnitGatesOptions(log_gamma=-25.0).check_flat_part()  # ε1 = 1e-30 ≪ γ θ_l
    with pytest.raises(ConfigError, match="unit-gates.eps1 must"):
        UnitGatesOptions(log_gamma=-100.0).check_flat_part()
    UnitGatesOptions(log_gamma=-100.0, eps1=1e-60).check_flat_part()
    with pytest.raises(ConfigError, match="unit-gates.eps2 must"):
        UnitGatesOptions(log_gamma=-1.0, eps2=1e-3, theta_high=1 - 1e-6).check_flat_part()
    UnitGatesOptions(log_gamma=-100.0, hyperprior="beta").check_flat_part()  # the Beta prior has no flat part to check


def test_the_python_api_refuses_a_fit_the_command_line_refuses():
    from bayesprune.api import fit_method

    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    before = [param.detach().clone() for param in net.parameters()]
    with pytest.raises(ConfigError, match="unit-gates.eps1 must"):
        fit_method(
            "unit-gates", net, (torch.randn(8, 3), torch.randint(0, 2, (8,))), options={"log_gamma": -100.0}, epochs=1
        )
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, net.parameters()))  # refused before training
