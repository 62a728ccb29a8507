"""Stochastic masks, one-shot criteria, the point-mass spike-and-slab and the PAC-Bayes objective (paper 000),
each against an independent oracle."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Normal, kl_divergence

from bayesprune.core.criteria import saliency
from bayesprune.core.gates import StochasticMasks, block_isotropic, isotropic
from bayesprune.core.pruning import Budget, lexicographic_ranks, prune
from bayesprune.methods.pbp import network_kl
from bayesprune.methods.pbp.bounds import pac_bayes_bound
from bayesprune.methods.pbp.distributions import DiracSpikeSlab
from bayesprune.methods.pbp.guide import DiracSpikeSlabGuide
from bayesprune.methods.pbp.objectives import GibbsRisk, PACBayesBound
from bayesprune.methods.pft import mask_overlap
from bayesprune.models import BayesianNetwork, BoundedCategorical, mlp
from bayesprune.models.priors import GivenPrior


@pytest.mark.parametrize("shape", [(5,), (3, 4)])
def test_dirac_spike_slab_kl_matches_a_monte_carlo_estimate(shape):
    """KL(q ‖ p) of appendix B.4 against E_q[log q(w) − log p(w)] in the measure δ₀ + Lebesgue."""
    torch.manual_seed(0)
    q = DiracSpikeSlab(torch.rand(shape) * 0.9 + 0.05, torch.randn(shape), torch.rand(shape) + 0.2)
    p = DiracSpikeSlab(torch.rand(shape) * 0.9 + 0.05, torch.randn(shape), torch.rand(shape) + 0.5)
    draws = q.sample((400_000,)).double()
    q64 = DiracSpikeSlab(q.probs.double(), q.loc.double(), q.scale.double())
    p64 = DiracSpikeSlab(p.probs.double(), p.loc.double(), p.scale.double())
    ratio = q64.log_prob(draws) - p64.log_prob(draws)
    estimate, error = ratio.mean(0), ratio.std(0) / math.sqrt(len(draws))
    exact = kl_divergence(q, p).double()
    assert torch.all((exact - estimate).abs() < 4 * error + 1e-3)


def test_dirac_spike_slab_kl_of_a_never_pruned_parameter_is_the_gaussian_kl():
    loc, scale = torch.randn(6), torch.rand(6) + 0.1
    prior_loc, prior_scale = torch.randn(6), torch.rand(6) + 0.3
    ones = torch.ones(6)
    exact = kl_divergence(DiracSpikeSlab(ones, loc, scale), DiracSpikeSlab(ones, prior_loc, prior_scale))
    torch.testing.assert_close(exact, kl_divergence(Normal(loc, scale), Normal(prior_loc, prior_scale)))


def test_network_kl_covers_every_parameter_of_every_layer():
    """The KL PBP bounds with, summed by hand over every weight and bias of a small network."""
    torch.manual_seed(1)
    net = mlp((4,), 3, hidden=[5])
    names = [name for name, _ in net.named_parameters()]
    priors = {
        name: DiracSpikeSlab(
            torch.rand(p.shape) * 0.8 + 0.1 if name.endswith("weight") else torch.ones(p.shape),
            p.detach() + 0.1,
            torch.full(p.shape, 0.2),
        )
        for name, p in net.named_parameters()
    }
    model = BayesianNetwork(net, GivenPrior(priors), BoundedCategorical(10))
    keep = {name: torch.rand(priors[name].probs.shape) * 0.8 + 0.1 for name in names if name.endswith("weight")}
    guide = DiracSpikeSlabGuide(model, keep, scale=0.3)
    by_hand = 0.0
    for name, param in net.named_parameters():
        lam = keep[name].double().numpy() if name in keep else np.ones(param.shape)
        lam0, mu0, s0 = (getattr(priors[name], key).double().numpy() for key in ("probs", "loc", "scale"))
        mu, s = param.detach().double().numpy(), 0.3
        with np.errstate(divide="ignore", invalid="ignore"):
            bernoulli = np.where(lam < 1, lam * np.log(lam / lam0) + (1 - lam) * np.log((1 - lam) / (1 - lam0)), 0.0)
        gaussian = 0.5 * ((mu - mu0) ** 2 / s0**2 + s**2 / s0**2 - np.log(s**2 / s0**2) - 1)
        by_hand += float((bernoulli + lam * gaussian).sum())
    assert network_kl(guide, priors) == pytest.approx(by_hand, rel=1e-5)
    assert len(names) == 4  # two weights and two biases, the output layer's included


def test_relaxed_masks_keep_with_probability_lambda_and_harden_as_the_temperature_falls():
    """Concrete(λ, 1 − λ) is above 1/2 with probability λ at every temperature; as β → 0 its draws
    concentrate on {0, 1}, so their mean tends to λ (appendix B.3)."""
    torch.manual_seed(2)
    lam = torch.tensor([0.05, 0.3, 0.5, 0.8, 0.97])
    hard, gaps = [], []
    for temperature in (1.0, 0.5, 0.1, 0.01):
        masks = StochasticMasks({"w": lam.expand(20_000, 5).clone()}, temperature=temperature)
        draws = masks.relaxed()["w"].detach()
        assert torch.all(((draws > 0.5).float().mean(0) - lam).abs() < 0.015)
        hard.append(float(((draws < 1e-3) | (draws > 1 - 1e-3)).float().mean()))
        gaps.append(float((draws.mean(0) - lam).abs().max()))
    assert hard == sorted(hard) and hard[-1] > 0.95
    assert gaps[-1] < 0.01 < gaps[0]


def test_clamped_masks_give_lambda_back_and_relax_at_the_ends():
    lam = torch.tensor([0.0, 0.2, 1.0])
    masks = StochasticMasks({"w": lam}, parameterization="clamp")
    torch.testing.assert_close(masks.probabilities()["w"], lam)
    draws = masks.relaxed()["w"]
    assert torch.isfinite(draws).all() and draws[0] < 1e-3 and draws[2] > 1 - 1e-3


def test_block_isotropic_keeps_the_top_scores_at_the_expected_sparsity():
    """Eq. 6: the k = (1 − s)·D weights of highest score get 1 − sε/(1 − s), the rest ε; mean 1 − λ = s."""
    torch.manual_seed(3)
    scores = {"a": torch.rand(40, 10, dtype=torch.float64), "b": torch.rand(100, dtype=torch.float64)}
    sparsity, epsilon = 0.9, 0.01
    lam = block_isotropic(scores, sparsity, epsilon)
    flat_scores = np.concatenate([s.numpy().ravel() for s in scores.values()])
    flat = np.concatenate([v.numpy().ravel() for v in lam.values()])
    top = np.argsort(flat_scores)[-50:]
    assert np.allclose(flat[top], 1 - sparsity * epsilon / (1 - sparsity))
    assert np.allclose(np.delete(flat, top), epsilon)
    assert 1 - flat.mean() == pytest.approx(sparsity, abs=1e-6)
    assert 1 - np.concatenate(
        [v.numpy().ravel() for v in isotropic(scores, sparsity).values()]
    ).mean() == pytest.approx(sparsity)
    with pytest.raises(ValueError, match="s·ε/\\(1 − s\\) < 1"):
        block_isotropic(scores, 0.99, 0.02)


def test_mask_ranks_break_ties_in_lambda_by_the_tiebreak_not_by_position():
    masks = StochasticMasks(
        {"a": torch.tensor([1.0, 1.0, 0.3]), "b": torch.tensor([1.0, 1.0])}, parameterization="clamp"
    )
    magnitude = {"a": torch.tensor([0.1, 0.5, 9.0]), "b": torch.tensor([0.2, 0.7])}
    kept = prune(masks.ranks(magnitude), Budget(sparsity=0.6))  # keep 2 of 5: the two λ = 1 weights of largest |w|
    assert kept["a"].tolist() == [False, True, False] and kept["b"].tolist() == [False, True]


def test_lexicographic_ranks_order_like_sorting_pairs():
    rng = np.random.default_rng(4)
    primary = {
        "a": torch.tensor(rng.integers(0, 3, 12).astype(float)),
        "b": torch.tensor(rng.integers(0, 3, 8).astype(float)),
    }
    secondary = {"a": torch.tensor(rng.random(12)), "b": torch.tensor(rng.random(8))}
    ranks = lexicographic_ranks(primary, secondary)
    pairs = list(zip(torch.cat(list(primary.values())).tolist(), torch.cat(list(secondary.values())).tolist()))
    expected = np.empty(len(pairs))
    expected[sorted(range(len(pairs)), key=lambda i: pairs[i])] = np.arange(len(pairs))
    assert torch.cat(list(ranks.values())).tolist() == expected.tolist()


def test_mask_overlap_is_the_share_of_the_start_mask_kept():
    start = {"w": torch.tensor([True, True, True, False])}
    end = {"w": torch.tensor([True, False, True, True])}
    assert mask_overlap(start, end) == pytest.approx(2 / 3)


def test_snip_scores_are_weight_times_the_finite_difference_gradient():
    torch.manual_seed(5)
    net = mlp((3,), 2, hidden=[4]).double()
    x, y = torch.randn(16, 3, dtype=torch.float64), torch.randint(0, 2, (16,))
    scores = saliency("snip", net, x=x, y=y, loss=F.cross_entropy)
    weight = net[1].weight
    for index in [(0, 0), (2, 1), (3, 2)]:
        with torch.no_grad():
            weight[index] += 1e-6
            up = F.cross_entropy(net(x), y).item()
            weight[index] -= 2e-6
            down = F.cross_entropy(net(x), y).item()
            weight[index] += 1e-6
        assert scores["1.weight"][index].item() == pytest.approx(
            abs(weight[index].item() * (up - down) / 2e-6), rel=1e-5
        )
    assert set(scores) == {"1.weight", "3.weight"}
    torch.testing.assert_close(saliency("magnitude", net)["3.weight"], net[3].weight.detach().abs())


def test_bounded_cross_entropy_is_the_clamped_loss_over_log_one_over_p_min():
    likelihood = BoundedCategorical(100, min_prob=1e-4)
    logits = torch.tensor([[10.0, 0.0, -5.0], [0.0, 0.0, 0.0], [-20.0, 5.0, 0.0]])
    y = torch.tensor([0, 1, 0])
    loss = -likelihood.distribution(logits).log_prob(y)
    expected = torch.minimum(F.cross_entropy(logits, y, reduction="none"), torch.tensor(math.log(1e4))) / math.log(1e4)
    torch.testing.assert_close(loss, expected)
    assert torch.all((loss >= 0) & (loss <= 1))


def test_the_pac_bayes_objective_is_theorem_1_of_the_gibbs_risk_and_the_exact_kl():
    """Same draws (same seed): PACBayesBound's loss equals eq. 4 of GibbsRisk's loss and the network KL."""
    torch.manual_seed(6)
    net = mlp((4,), 3, hidden=[5])
    priors = {
        name: DiracSpikeSlab(
            torch.full(p.shape, 0.7) if name.endswith("weight") else torch.ones(p.shape),
            p.detach().clone(),
            torch.full(p.shape, 0.1),
        )
        for name, p in net.named_parameters()
    }
    model = BayesianNetwork(net, GivenPrior(priors), BoundedCategorical(50))
    guide = DiracSpikeSlabGuide(
        model,
        {name: torch.full(p.shape, 0.6) for name, p in net.named_parameters() if name.endswith("weight")},
        scale=0.05,
    )
    x, y = torch.randn(50, 4), torch.randint(0, 3, (50,))
    torch.manual_seed(7)
    bound = PACBayesBound(n=50, delta=0.05).differentiable_loss(model, guide, x, y)
    torch.manual_seed(7)
    risk = GibbsRisk(dataset_size=50).differentiable_loss(model, guide, x, y)
    expected = pac_bayes_bound(
        risk.detach().double(), torch.tensor(network_kl(guide, priors), dtype=torch.float64), n=50, delta=0.05
    )
    assert float(bound.detach()) == pytest.approx(float(expected), rel=1e-5)
    assert 0 <= float(risk.detach()) <= 1
