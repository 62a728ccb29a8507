"""The sBNN plug-in (paper 003): what its scores rank, against hand-computed eq. 3.8."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from bayesprune.core.pruning import Budget, prune
from bayesprune.guides import SpikeSlabGuide
from bayesprune.methods.sbnn import SBNNFitted, SBNNOptions
from bayesprune.models import LIKELIHOODS, BayesianNetwork


def saturated_fit(options: SBNNOptions) -> SBNNFitted:
    """A small sBNN whose every weight has float32 p* = 1.0 but a distinct B − A (eq. 3.8)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    model = BayesianNetwork(net, options.prior(), LIKELIHOODS["classification"](100))
    guide = SpikeSlabGuide(model, init_scale=options.init_scale)
    with torch.no_grad():
        n = guide.loc.numel()
        # |m| rises with position while the shuffled order decides the logits: network order and
        # logit order disagree.
        guide.loc.copy_((0.5 + torch.rand(n)) * torch.sign(torch.randn(n)))
        guide.rho.fill_(math.log(math.expm1(0.01)))
    return SBNNFitted(model, guide)


def eq_3_8_logits(fitted: SBNNFitted, options: SBNNOptions) -> np.ndarray:
    """B − A of eq. 3.8 in float64 numpy, from the guide's (float32) m and σ."""
    m = fitted.guide.loc.detach().double().numpy()
    s = torch.nn.functional.softplus(fitted.guide.rho.detach()).double().numpy()
    tau0, tau1, pi = math.exp(options.log_tau0), math.exp(options.log_tau1), options.pi
    a = (m**2 + s**2) / (2 * tau1**2) + math.log(tau1 / pi)
    b = (m**2 + s**2) / (2 * tau0**2) + math.log(tau0 / (1 - pi))
    return b - a


def test_a_tied_budget_removes_the_lowest_logits_not_the_first_in_network_order():
    options = SBNNOptions()  # the paper's regression prior: log tau0 = -6, log tau1 = 1
    fitted = saturated_fit(options)
    probabilities = torch.cat([p.flatten() for p in fitted.inclusion_probabilities().values()])
    assert bool((probabilities == 1.0).all()), "precondition: every p* rounds to 1 in float32"
    logits = eq_3_8_logits(fitted, options)
    scores = torch.cat([s.flatten() for s in fitted.scores().values()])
    # The prior holds τ0, τ1 in float32 (relative error ~1e-7), a common factor on every logit.
    np.testing.assert_allclose(scores.numpy(), logits, rtol=1e-6)
    for fraction in (0.1, 0.5, 0.9):
        masks = prune(fitted.scores(), Budget(sparsity=fraction))
        removed = np.flatnonzero(~torch.cat([mask.flatten() for mask in masks.values()]).numpy())
        expected = np.argsort(logits, kind="stable")[: math.floor(fraction * logits.size)]
        assert set(removed.tolist()) == set(expected.tolist())
        # Ranked by the rounded probabilities, the same budget takes the first entries instead.
        by_probability = prune(fitted.inclusion_probabilities(), Budget(sparsity=fraction))
        first = np.flatnonzero(~torch.cat([mask.flatten() for mask in by_probability.values()]).numpy())
        assert first.tolist() == list(range(len(expected))) and set(first) != set(expected)


def test_local_reparameterization_on_a_convolution_is_refused_by_name():
    from bayesprune.core.errors import ConfigError
    from bayesprune.data import Dataset
    from bayesprune.methods import FitContext
    from bayesprune.methods.sbnn import fit_posterior
    from bayesprune.pipeline.config import load_config

    config = load_config("default", ["sbnn.local_reparameterization=true", "train.epochs=1"])
    x, y = torch.randn(8, 1, 6, 6), torch.randint(0, 2, (8,))
    dataset = Dataset("toy", "classification", x, y, x, y, (1, 6, 6), 2)
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(32, 2))
    with pytest.raises(ConfigError, match=r"^sbnn.local_reparameterization must be false .*\(0\)"):
        fit_posterior(
            net, dataset, config.method_options, FitContext.from_config(config, dataset, device=torch.device("cpu"))
        )


def test_a_sparsity_counts_biases_only_when_asked_and_both_sparsities_are_reported():
    from bayesprune.data import Dataset
    from bayesprune.pipeline.evaluation import pruning_curve

    options = SBNNOptions()
    fitted = saturated_fit(options)  # 4-6-2: 24 + 12 weights, 6 + 2 biases
    x = torch.randn(8, 4)
    labels = torch.zeros(8, dtype=torch.long)
    dataset = Dataset("toy", "classification", x, labels, x, labels, (4,), 2)
    logits = eq_3_8_logits(fitted, options)
    is_bias = np.zeros(logits.size, dtype=bool)
    is_bias[24:30], is_bias[42:44] = True, True  # site order: 0.weight, 0.bias, 2.weight, 2.bias
    with_biases, weights_only = (
        pruning_curve(fitted, dataset, sparsities=[0.5], include_biases=flag)[0] for flag in (True, False)
    )
    # Biases ranked with the weights: half of all 44 parameters go, the lowest logits among all.
    removed_weights = int(np.sum(~is_bias[np.argsort(logits, kind="stable")[:22]]))
    assert with_biases["n_weights_kept"] == 22 and with_biases["sparsity"] == 0.5
    assert with_biases["sparsity_weights"] == round(removed_weights / 36, 6)
    # Biases kept: half of the 36 weights go, and 18 of 44 parameters.
    assert weights_only["sparsity_weights"] == 0.5 and weights_only["n_weights_kept"] == 26
    assert weights_only["sparsity"] == round(18 / 44, 6)
