"""Tests of bayesprune.core.objectives.AnalyticKLELBO and the minibatch penalty weights of bayesprune.core.loop.

Oracles: a hand-written sBNN objective (plain ``F.linear`` forward pass, explicit Gaussian/Categorical
log-likelihood, KL from torch's closed-form Gaussian and Bernoulli KLs, p* from the paper's eq. 3.8),
Monte-Carlo estimates of its expectation, and exact rational arithmetic for the penalty weights.
"""

import math
from fractions import Fraction

import pyro
import pytest
import torch
import torch.nn.functional as F
from pyro.poutine.messenger import Messenger
from torch.distributions import Bernoulli, Normal, kl_divergence

from bayesprune.core.criteria import weight_sites
from bayesprune.core.distributions import SpikeSlabPosterior
from bayesprune.core.fused import kernel_mode
from bayesprune.core.objectives import AnalyticKLELBO, site_kl
from bayesprune.core.penalties import GeometricPenalty, PenaltyScale, UniformPenalty
from bayesprune.guides import SpikeSlabGuide
from bayesprune.methods.pbp.distributions import DiracSpikeSlab
from bayesprune.methods.pbp.guide import DiracSpikeSlabGuide
from bayesprune.models import BayesianNetwork, Categorical, Gaussian, mlp
from bayesprune.models.priors import GivenPrior, SpikeSlabPrior

DOUBLE = torch.float64
PI, TAU0, TAU1 = 0.5, 0.05, 1.0
NOISE = 0.7


class DrawRecorder(Messenger):
    """Records every weight draw W ~ q (guide sites) and the observed sites' distributions, in call order."""

    def __init__(self):
        super().__init__()
        self.draws = []
        self.observed = []

    def _postprocess_message(self, msg):
        if msg["type"] != "sample":
            return
        base = getattr(msg["fn"], "base_dist", msg["fn"])
        if isinstance(base, SpikeSlabPosterior):
            if not self.draws or msg["name"] in self.draws[-1]:
                self.draws.append({})
            self.draws[-1][msg["name"]] = msg["value"].detach().clone()
        elif msg["is_observed"]:
            self.observed.append(msg["fn"])


def make_problem(likelihood, *, dataset_size=24, batch_size=None, hidden=3, init_scale=0.2):
    """A tiny 2-input MLP sBNN in float64 with data; returns (model, guide, x, y)."""
    batch_size = batch_size or dataset_size
    outputs = 3 if likelihood == "categorical" else 1
    net = mlp((2,), outputs, hidden=[hidden]).double()
    prior = SpikeSlabPrior(pi=PI, tau0=TAU0, tau1=TAU1)
    lik = Categorical(dataset_size) if likelihood == "categorical" else Gaussian(dataset_size, scale=NOISE)
    model = BayesianNetwork(net, prior, lik)
    guide = SpikeSlabGuide(model, init_scale=init_scale)
    x = torch.randn(batch_size, 2, dtype=DOUBLE)
    if likelihood == "categorical":
        y = torch.randint(0, 3, (batch_size,))
    else:
        y = torch.randn(batch_size, dtype=DOUBLE)
    return model, guide, x, y


def forward(params, x):
    """The mlp [Flatten, Linear, ReLU, Linear] written out with F.linear."""
    hidden = torch.relu(F.linear(x, params["1.weight"], params["1.bias"]))
    return F.linear(hidden, params["3.weight"], params["3.bias"])


def hand_nll(likelihood, params, x, y, dataset_size):
    """-sum_i log p(y_i | W) * N / B."""
    out = forward(params, x)
    if likelihood == "categorical":
        log_lik = torch.log_softmax(out, -1).gather(-1, y[:, None]).squeeze(-1)
    else:
        mu = out.squeeze(-1)
        log_lik = -0.5 * ((y - mu) / NOISE) ** 2 - math.log(NOISE) - 0.5 * math.log(2 * math.pi)
    return -log_lik.sum() * dataset_size / len(x)


def hand_variational_params(model):
    """loc and scale = softplus(rho) of every site, split from the guide's flat parameters in network order."""
    loc = pyro.param("loc").unconstrained()
    rho = pyro.param("rho").unconstrained()
    locs, scales, start = {}, {}, 0
    for name, param in model.net.named_parameters():
        size = param.numel()
        locs[name] = loc[start : start + size].view(param.shape)
        scales[name] = F.softplus(rho[start : start + size]).view(param.shape)
        start += size
    assert start == loc.numel()
    return locs, scales


def hand_kl(locs, scales):
    """Sum over weights of KL(q(W)q(Z) || pi(W, Z)) with p = p*(m, s) of eq. 3.8 (not detached).

    Chain rule: KL(Bern(p) || Bern(pi)) + p KL(N(m, s) || N(0, tau1)) + (1 - p) KL(N(m, s) || N(0, tau0)).
    """
    total = 0.0
    for name in locs:
        m, s = locs[name], scales[name]
        second = m**2 + s**2
        a = second / (2 * TAU1**2) + math.log(TAU1 / PI)
        b = second / (2 * TAU0**2) + math.log(TAU0 / (1 - PI))
        p = 1 / (1 + torch.exp(a - b))
        q = Normal(m, s)
        kl = (
            kl_divergence(Bernoulli(probs=p), Bernoulli(probs=torch.full_like(p, PI)))
            + p * kl_divergence(q, Normal(torch.zeros_like(m), torch.full_like(m, TAU1)))
            + (1 - p) * kl_divergence(q, Normal(torch.zeros_like(m), torch.full_like(m, TAU0)))
        )
        total = total + kl.sum()
    return total


def register_params(model, guide, x, y):
    """Run the guide once so that its parameters live in Pyro's parameter store."""
    guide(x, y)


LIKELIHOODS = ["categorical", "gaussian"]


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
@pytest.mark.parametrize("dataset_size, batch_size", [(24, 24), (48, 12)])
def test_loss_equals_hand_written_objective_at_the_same_draw(likelihood, dataset_size, batch_size):
    """At the recorded draw W, loss == N/B * (-log p(y|W)) + sum KL, with the KL from torch's closed forms."""
    model, guide, x, y = make_problem(likelihood, dataset_size=dataset_size, batch_size=batch_size)
    register_params(model, guide, x, y)
    elbo = AnalyticKLELBO()
    with DrawRecorder() as recorder:
        loss = elbo.loss(model, guide, x, y)
    assert len(recorder.draws) == 1 and set(recorder.draws[0]) == set(model.site_shapes)
    with torch.no_grad():
        locs, scales = hand_variational_params(model)
        expected = hand_nll(likelihood, recorder.draws[0], x, y, dataset_size) + hand_kl(locs, scales)
    assert loss == pytest.approx(expected.item(), rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
@pytest.mark.parametrize("num_particles", [1, 3])
def test_loss_averages_particles(likelihood, num_particles):
    """With L particles the loss is the mean over the L recorded draws of the NLL, plus the (exact) KL."""
    model, guide, x, y = make_problem(likelihood)
    register_params(model, guide, x, y)
    with DrawRecorder() as recorder:
        loss = AnalyticKLELBO(num_particles=num_particles).loss(model, guide, x, y)
    assert len(recorder.draws) == num_particles
    with torch.no_grad():
        locs, scales = hand_variational_params(model)
        nll = sum(hand_nll(likelihood, draw, x, y, len(x)) for draw in recorder.draws) / num_particles
        expected = nll + hand_kl(locs, scales)
    assert loss == pytest.approx(expected.item(), rel=1e-10)


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
def test_expected_loss_matches_independent_monte_carlo(likelihood):
    """The loss averaged over many calls equals E_q[-log p(D|W)] + KL estimated with independently drawn W."""
    model, guide, x, y = make_problem(likelihood, init_scale=0.4)
    register_params(model, guide, x, y)
    elbo = AnalyticKLELBO()
    losses = torch.tensor([elbo.loss(model, guide, x, y) for _ in range(300)], dtype=DOUBLE)
    with torch.no_grad():
        locs, scales = hand_variational_params(model)
        kl = hand_kl(locs, scales)
        draws = 3000
        nll = torch.stack(
            [
                hand_nll(likelihood, {k: locs[k] + scales[k] * torch.randn_like(locs[k]) for k in locs}, x, y, len(x))
                for _ in range(draws)
            ]
        )
    oracle = nll.mean() + kl
    error = math.sqrt(losses.var().item() / len(losses) + nll.var().item() / draws)
    assert losses.mean().item() == pytest.approx(oracle.item(), abs=4 * error)
    # The spread of the loss is the spread of the NLL alone: the KL part is not sampled.
    assert losses.std().item() == pytest.approx(nll.std().item(), rel=0.25)


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
@pytest.mark.parametrize("weight", [0.0, 0.5, 2.0, 7.0])
def test_penalty_scale_multiplies_only_the_kl(likelihood, weight):
    """Under PenaltyScale(w) with the same draws, loss(w) - loss(1) == (w - 1) * KL and loss(0) == NLL."""
    model, guide, x, y = make_problem(likelihood, dataset_size=40, batch_size=10)
    register_params(model, guide, x, y)
    elbo = AnalyticKLELBO()
    pyro.set_rng_seed(11)
    with DrawRecorder() as recorder:
        base = elbo.loss(model, guide, x, y)
    pyro.set_rng_seed(11)
    with PenaltyScale(weight):
        scaled = elbo.loss(model, guide, x, y)
    with torch.no_grad():
        kl = hand_kl(*hand_variational_params(model)).item()
        nll = hand_nll(likelihood, recorder.draws[0], x, y, 40).item()
    assert scaled - base == pytest.approx((weight - 1) * kl, rel=1e-9, abs=1e-9)
    assert scaled == pytest.approx(nll + weight * kl, rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
@pytest.mark.parametrize("num_particles", [1, 2])
def test_gradient_matches_hand_written_objective(likelihood, num_particles):
    """d loss / d(loc, rho) equals autograd of the hand-written objective at the same eps.

    The hand-written KL keeps p = p*(m, s) differentiable; the library detaches p. By the envelope
    theorem (dR/dp = 0 at p*) the two gradients must agree.
    """
    model, guide, x, y = make_problem(likelihood, dataset_size=30, batch_size=10)
    register_params(model, guide, x, y)
    with PenaltyScale(1.5), DrawRecorder() as recorder:
        loss = AnalyticKLELBO(num_particles=num_particles).differentiable_loss(model, guide, x, y)
    loc_u, rho_u = pyro.param("loc").unconstrained(), pyro.param("rho").unconstrained()
    grads = torch.autograd.grad(loss, [loc_u, rho_u])

    locs, scales = hand_variational_params(model)
    nll = 0.0
    for draw in recorder.draws:
        eps = {k: ((draw[k] - locs[k]) / scales[k]).detach() for k in draw}
        nll = nll + hand_nll(likelihood, {k: locs[k] + scales[k] * eps[k] for k in draw}, x, y, 30)
    hand = nll / num_particles + 1.5 * hand_kl(locs, scales)
    expected = torch.autograd.grad(hand, [loc_u, rho_u])
    assert loss.item() == pytest.approx(hand.item(), rel=1e-10)
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-9)


def test_loss_and_grads_accumulates_the_same_gradient():
    """loss_and_grads returns the loss and leaves d loss / d params in .grad (same draw as differentiable_loss)."""
    model, guide, x, y = make_problem("gaussian")
    register_params(model, guide, x, y)
    elbo = AnalyticKLELBO()
    loc_u = pyro.param("loc").unconstrained()
    pyro.set_rng_seed(3)
    (expected,) = torch.autograd.grad(elbo.differentiable_loss(model, guide, x, y), [loc_u])
    loc_u.grad = None
    pyro.set_rng_seed(3)
    value = elbo.loss_and_grads(model, guide, x, y)
    pyro.set_rng_seed(3)
    assert value == pytest.approx(elbo.loss(model, guide, x, y), rel=1e-12)
    torch.testing.assert_close(loc_u.grad, expected)


# Minibatch penalty weights (paper 003, eqs. 4.2-4.3).

NUM_BATCHES = [1, 2, 3, 7, 10, 64, 469, 2000]


@pytest.mark.parametrize("penalty", [UniformPenalty(), GeometricPenalty()], ids=["uniform", "geometric"])
@pytest.mark.parametrize("num_batches", NUM_BATCHES)
def test_penalty_weights_sum_to_one_epoch(penalty, num_batches):
    """(1/M) sum_i weight(i, M) == 1, so the M per-batch costs of an epoch add up to J (eqs. 4.2-4.3)."""
    weights = [penalty.weight(i, num_batches) for i in range(num_batches)]
    assert all(math.isfinite(w) and w >= 0 for w in weights)
    assert math.fsum(weights) / num_batches == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("num_batches", [1, 2, 3, 5, 8, 13, 30, 60])
def test_geometric_weights_match_exact_fractions(num_batches):
    """weight(i, M) == M r_i with r_i = 2^(M-i) / (2^M - 1), i = 1..M, computed exactly with Fractions."""
    for i in range(1, num_batches + 1):
        exact = Fraction(num_batches * 2 ** (num_batches - i), 2**num_batches - 1)
        assert GeometricPenalty().weight(i - 1, num_batches) == pytest.approx(float(exact), rel=1e-13)


def test_geometric_weights_large_epoch_finite_and_decreasing():
    """For M = 2000 (2^M overflows a float) the weights are finite, non-negative, non-increasing and start at M/2."""
    weights = [GeometricPenalty().weight(i, 2000) for i in range(2000)]
    assert all(math.isfinite(w) and w >= 0 for w in weights)
    assert all(a >= b for a, b in zip(weights, weights[1:]))
    # r_1 = 2^(M-1) / (2^M - 1) -> 1/2, so M r_1 = M/2 up to 2^-M.
    assert weights[0] == pytest.approx(1000.0, rel=1e-15)
    assert weights[1] == pytest.approx(500.0, rel=1e-15)


@pytest.mark.parametrize("num_batches", [1, 4, 100])
def test_uniform_weights_are_one(num_batches):
    """Uniform penalty: every batch carries R/M, i.e. weight M * (1/M) = 1 against the N/B-scaled likelihood."""
    assert all(UniformPenalty().weight(i, num_batches) == 1.0 for i in range(num_batches))


# The network-wide posterior: the KL of every site fused with its gradient (bayesprune.core.fused).


class PerSitePrior(SpikeSlabPrior):
    """The same spike-and-slab prior, but with a different τ0 on the last layer: no shared constants."""

    def distribution(self, name, param):
        if name.startswith("3."):
            return SpikeSlabPrior(pi=PI, tau0=2 * TAU0, tau1=TAU1).distribution(name, param)
        return super().distribution(name, param)


def test_fused_kl_equals_the_plain_kl_values_and_gradients(kernels):
    """Each site's summed KL from the guide's fused network-wide evaluation, its kernels run eagerly or
    compiled (train.kernels), equals the plain autograd formula (F.softplus, eq. 3.7 per site at the
    detached p* of eq. 3.8) to float32 precision, and so do the gradients in m and ρ, with a different
    penalty weight per site and p* from its floor to 1."""
    net = mlp((7,), 3, hidden=[13])
    model = BayesianNetwork(net, SpikeSlabPrior(pi=PI, tau0=TAU0, tau1=TAU1), Categorical(10))
    guide = SpikeSlabGuide(model, init_scale=0.1)
    with torch.no_grad():
        guide.loc.copy_(torch.randn_like(guide.loc) * torch.logspace(-3, 0, guide.loc.numel()))
        guide.rho.copy_(torch.linspace(-9, 3, guide.rho.numel()))
    priors = {name: prior.base_dist for name, prior in model.site_priors().items()}
    weights = torch.linspace(0.5, 2, len(priors))
    with kernel_mode(kernels):
        posteriors = guide.posteriors()
        fused = torch.stack([site_kl(posteriors[name], prior) for name, prior in priors.items()])
        (fused * weights).sum().backward()
    probs = torch.cat([q.probs.flatten() for q in posteriors.values()])
    assert probs.min() < 0.05 and probs.max() > 1 - 1e-6
    grads = guide.loc.grad.clone(), guide.rho.grad.clone()
    guide.loc.grad = guide.rho.grad = None
    locs, scales = guide._split(guide.loc), guide._split(F.softplus(guide.rho))
    plain = torch.stack(
        [
            kl_divergence(SpikeSlabPosterior(locs[name], scales[name], posteriors[name].logits), prior).sum()
            for name, prior in priors.items()
        ]
    )
    (plain * weights).sum().backward()
    torch.testing.assert_close(fused, plain, rtol=2e-6, atol=1e-5)
    torch.testing.assert_close(grads, (guide.loc.grad, guide.rho.grad), rtol=2e-6, atol=1e-6)


def test_per_site_priors_fall_back_to_the_registered_kl():
    """With per-layer priors the guide builds plain per-site posteriors, whose KL is the registered one."""
    model = BayesianNetwork(mlp((7,), 3, hidden=[13]), PerSitePrior(pi=PI, tau0=TAU0, tau1=TAU1), Categorical(10))
    posteriors = SpikeSlabGuide(model, init_scale=0.1).posteriors()
    assert all(q._segment is None for q in posteriors.values())
    for name, prior in model.site_priors().items():
        assert torch.equal(
            site_kl(posteriors[name], prior.base_dist), kl_divergence(posteriors[name], prior.base_dist).sum()
        )


@pytest.mark.parametrize("parameterization", ["sigmoid", "clamp"])
def test_fused_pbp_kl_equals_the_plain_kl_values_and_gradients(parameterization, kernels):
    """PBP's posterior (paper 000, eq. 5): each site's summed KL to its per-weight prior from the guide's
    fused evaluation (eager or compiled kernels) equals the registered formula (appendix B.4) by autograd, and so do the gradients
    in λ's parameters, μ and log σ, with biases kept surely (λ = λ⁰ = 1) and a penalty weight per site."""
    net = mlp((7,), 3, hidden=[13])
    generator = torch.Generator().manual_seed(0)
    weights = set(weight_sites(net))

    def uniform(shape, low, high):
        return low + (high - low) * torch.rand(shape, generator=generator)

    priors = {
        name: DiracSpikeSlab(
            uniform(p.shape, 0.05, 0.95) if name in weights else torch.ones(p.shape),
            0.1 * torch.randn(p.shape, generator=generator),
            uniform(p.shape, 0.01, 0.2),
        )
        for name, p in net.named_parameters()
    }
    model = BayesianNetwork(net, GivenPrior(priors), Categorical(10), sites=list(priors))
    guide = DiracSpikeSlabGuide(
        model, {name: priors[name].probs for name in weights}, scale=0.05, parameterization=parameterization
    )
    parameters = [guide.loc, guide.log_scale, *guide.masks.parameters()]
    with torch.no_grad():
        for parameter in parameters:
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    site_weights = torch.linspace(0.5, 2, len(priors))
    with kernel_mode(kernels):
        posteriors = guide.posteriors()
        fused = torch.stack([site_kl(posteriors[name], prior.base_dist) for name, prior in model.site_priors().items()])
        (fused * site_weights).sum().backward()
    assert all(q._segment is not None for q in posteriors.values())
    grads = [parameter.grad.clone() for parameter in parameters]
    for parameter in parameters:
        parameter.grad = None
    keep, locs, scales = guide.masks.probabilities(), guide._split(guide.loc), guide._split(guide.log_scale.exp())
    plain = torch.stack(
        [
            kl_divergence(
                DiracSpikeSlab(keep.get(name, torch.ones_like(locs[name])), locs[name], scales[name]), prior.base_dist
            ).sum()
            for name, prior in model.site_priors().items()
        ]
    )
    (plain * site_weights).sum().backward()
    torch.testing.assert_close(fused, plain, rtol=2e-6, atol=1e-5)
    torch.testing.assert_close(grads, [parameter.grad for parameter in parameters], rtol=2e-6, atol=1e-6)


def test_vectorised_log1p_is_within_a_few_ulps_of_log1p_from_minus_one_up():
    """bayesprune.core.fused.log1p (softplus, the Concrete noise, PBP's fused Bernoulli KL) against float64 log1p."""
    from bayesprune.core.fused import log1p

    u = torch.cat(
        [-1 + torch.logspace(-7, 0, 2000)[:-1], -torch.logspace(-30, -1, 2000), torch.logspace(-30, 30, 2000)]
    )
    exact = torch.log1p(u.double())
    assert ((log1p(u).double() - exact).abs() <= 4 * torch.finfo(torch.float32).eps * exact.abs()).all()
