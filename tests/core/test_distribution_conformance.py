"""Pyro's distribution checks, adapted to every distribution bayesprune defines.

After the generic tests of Pyro's own suite (``tests/distributions/test_distributions.py``: sample
and batch/event shapes, ``expand`` to new and existing dimensions, support of samples,
``enumerate_support``, validation of parameters and values), with oracles that do not read the code
under test: ``log_prob`` is checked to integrate (or sum) to 1 by quadrature and against the
frequencies of its own samples, each registered KL against a Monte-Carlo estimate of
E_q[log q − log p], and the bounded cross-entropy against its formula written with ``log_softmax``.
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine
from scipy import integrate
from torch.distributions import Bernoulli, Normal, kl_divergence

from bayesprune.core.distributions import SpikeAndSlab, SpikeSlabPosterior
from bayesprune.guides import SpikeSlabGuide
from bayesprune.methods.pbp.distributions import DiracSpikeSlab
from bayesprune.methods.sparse_vd.distributions import AdditiveNormal, LogUniform
from bayesprune.models import BayesianNetwork, Categorical, mlp
from bayesprune.models.likelihoods import _BoundedCrossEntropy
from bayesprune.models.priors import SpikeSlabPrior

DOUBLE = torch.float64


def t(value):
    return torch.tensor(value, dtype=DOUBLE)


class Fixture(NamedTuple):
    """A distribution's constructor and one set of its parameters (batch shape from the parameters)."""

    name: str
    make: Callable
    params: dict

    def build(self, **overrides):
        return self.make(**{**self.params, **overrides})


FIXTURES = [
    Fixture("spike_slab", SpikeAndSlab, dict(pi=t(0.3), tau0=t(0.1), tau1=t(1.5))),
    Fixture("spike_slab_batch", SpikeAndSlab, dict(pi=t([0.2, 0.5, 0.9]), tau0=t(0.05), tau1=t([1.0, 2.0, 0.5]))),
    Fixture(
        "spike_slab_posterior", SpikeSlabPosterior, dict(loc=t([[0.3], [-1.0]]), scale=t([0.2, 0.7]), logits=t(0.4))
    ),
    Fixture("dirac_spike_slab", DiracSpikeSlab, dict(probs=t(0.6), loc=t(0.5), scale=t(0.8))),
    Fixture(
        "dirac_spike_slab_batch", DiracSpikeSlab, dict(probs=t([0.1, 0.7, 1.0]), loc=t([0.0, -2.0, 1.0]), scale=t(0.5))
    ),
    Fixture("additive_normal", AdditiveNormal, dict(loc=t([0.5, -0.2, 2.0]), log_sigma2=t([-2.0, 0.0, 1.0]))),
    Fixture(
        "bounded_cross_entropy",
        _BoundedCrossEntropy,
        dict(logits=t([[2.0, -1.0, 0.0, -9.0], [0.0, 0.0, 0.0, 0.0]]), min_prob=1e-3),
    ),
]
CONTINUOUS = [f for f in FIXTURES if f.make in (SpikeAndSlab, SpikeSlabPosterior, AdditiveNormal)]


def fixtures(selection):
    return pytest.mark.parametrize("fixture", selection, ids=[f.name for f in selection])


def parameter_shapes(d):
    """Parameter name → its shape, which is the batch shape but for a categorical's (the classes follow)."""
    classes = d.logits.shape[-1:] if isinstance(d, _BoundedCrossEntropy) else torch.Size()
    return {name: getattr(d, name).shape[: len(getattr(d, name).shape) - len(classes)] for name in d.arg_constraints}


# Shapes (Pyro: test_support_shape, test_infer_shapes, test_batch_log_prob shapes).


@fixtures(FIXTURES)
@pytest.mark.parametrize("sample_shape", [(), (4,), (2, 3)])
def test_sample_and_log_prob_shapes(fixture, sample_shape):
    d = fixture.build()
    x = d.sample(torch.Size(sample_shape))
    assert x.shape == torch.Size(sample_shape) + d.batch_shape + d.event_shape
    assert d.log_prob(x).shape == torch.Size(sample_shape) + d.batch_shape
    if d.has_rsample:
        assert d.rsample(torch.Size(sample_shape)).shape == x.shape


@fixtures(FIXTURES)
def test_batch_shape_is_the_parameters_broadcast(fixture):
    d = fixture.build()
    shapes = [value.shape for value in fixture.params.values() if torch.is_tensor(value)]
    if isinstance(d, _BoundedCrossEntropy):
        shapes = [shape[:-1] for shape in shapes]
    assert d.batch_shape == torch.broadcast_shapes(*shapes)
    assert set(parameter_shapes(d).values()) == {d.batch_shape}
    assert d.event_shape == torch.Size()


@fixtures(FIXTURES)
def test_support_contains_samples(fixture):
    d = fixture.build()
    assert d.support.check(d.sample((200,))).all()


# expand (Pyro: test_expand_by, test_expand_new_dim, test_expand_existing_dim, test_subsequent_expands_ok, test_expand_error).


def _expanded_shapes(batch_shape):
    grown = torch.Size([5]) + batch_shape
    existing = torch.Size([4 if size == 1 else size for size in batch_shape])
    return [grown, torch.Size([2]) + grown] + ([existing] if existing != batch_shape else [])


@fixtures(FIXTURES)
def test_expand(fixture):
    small = fixture.build()
    for shape in _expanded_shapes(small.batch_shape):
        large = small.expand(shape)
        assert large.batch_shape == shape and large.event_shape == small.event_shape
        assert type(large) is type(small)
        assert large._validate_args == small._validate_args
        assert parameter_shapes(large) == dict.fromkeys(small.arg_constraints, shape)
        x = large.sample()
        assert x.shape == shape
        assert torch.equal(large.log_prob(x), small.log_prob(x))
        # a value of the small batch shape is scored once per element of the large one
        y = small.sample()
        assert torch.equal(large.log_prob(y), small.log_prob(y).expand(shape))
        assert large.expand(torch.Size([3]) + shape).batch_shape == torch.Size([3]) + shape  # subsequent expands


@fixtures(FIXTURES)
def test_expand_error(fixture):
    d = fixture.build()
    if d.batch_shape:
        with pytest.raises((RuntimeError, ValueError)):
            d.expand(torch.Size([d.batch_shape[-1] + 1]))


@fixtures(FIXTURES)
def test_expand_with_instance_keeps_subclass(fixture):
    d = fixture.build()
    instance = type(d).__new__(type(d))
    large = d.expand(torch.Size([2]) + d.batch_shape, _instance=instance)
    assert large is instance and large.batch_shape == torch.Size([2]) + d.batch_shape


@fixtures(FIXTURES)
def test_log_prob_of_a_scalar_broadcasts_to_the_batch(fixture):
    d = fixture.build().expand(torch.Size([5]) + fixture.build().batch_shape)
    value = d.sample()[(0,) * len(d.batch_shape)]  # one value, 0-dimensional
    assert d.log_prob(value).shape == d.batch_shape


def test_spike_and_slab_in_a_plate_counts_every_element():
    """Regression: a scalar observation in plate(5) of an expanded prior scores 5 log p(x), not log p(x)."""
    pi, tau0, tau1, x = 0.3, 0.1, 1.5, 0.4

    def normal(scale):
        return math.exp(-0.5 * (x / scale) ** 2) / (scale * math.sqrt(2 * math.pi))

    single = math.log(pi * normal(tau1) + (1 - pi) * normal(tau0))

    def model():
        prior = SpikeAndSlab(t(pi), t(tau0), t(tau1)).expand([5])
        with pyro.plate("weights", 5):
            pyro.sample("w", prior, obs=t(x))

    with pyro.validation_enabled(False):
        trace = poutine.trace(model).get_trace()
        total = trace.log_prob_sum().item()
    assert total == pytest.approx(5 * single, rel=1e-12)


def test_log_uniform_expand_and_broadcast():
    d = LogUniform(dtype=DOUBLE)
    large = d.expand([5, 3])
    assert large.batch_shape == (5, 3) and large.event_shape == ()
    value = t(0.25)
    assert torch.equal(large.log_prob(value), torch.full((5, 3), -math.log(0.25), dtype=DOUBLE))
    assert large.log_prob(torch.full((2, 1, 3), 0.5, dtype=DOUBLE)).shape == (2, 5, 3)
    instance = LogUniform.__new__(LogUniform)
    assert d.expand([4], _instance=instance) is instance
    with pytest.raises(NotImplementedError):
        large.sample()


# enumerate_support (Pyro: test_enumerate_support, test_enumerate_support_shape).


@fixtures(FIXTURES)
def test_enumerate_support(fixture):
    d = fixture.build()
    if not d.has_enumerate_support:
        with pytest.raises(NotImplementedError):
            d.enumerate_support()
        return
    values = d.enumerate_support()
    size = values.shape[0]
    assert values.shape == (size,) + d.batch_shape
    assert d.enumerate_support(expand=False).shape == (size,) + (1,) * len(d.batch_shape)
    assert d.log_prob(values).shape == (size,) + d.batch_shape
    assert d.log_prob(d.enumerate_support(expand=False)).shape == (size,) + d.batch_shape
    large = d.expand(torch.Size([3]) + d.batch_shape)
    assert large.enumerate_support().shape == (size, 3) + d.batch_shape


# Validation of parameters and values (Pyro: test_distribution_validate_args).

BAD_PARAMETERS = [
    (SpikeAndSlab, dict(pi=t(1.2), tau0=t(0.1), tau1=t(1.0))),
    (SpikeAndSlab, dict(pi=t(0.0), tau0=t(0.1), tau1=t(1.0))),
    (SpikeAndSlab, dict(pi=t(0.5), tau0=t(-0.1), tau1=t(1.0))),
    (SpikeAndSlab, dict(pi=t(0.5), tau0=t(2.0), tau1=t(1.0))),  # tau0 > tau1
    (SpikeAndSlab, dict(pi=t(0.5), tau0=t([0.1, 1.0]), tau1=t(1.0))),  # tau0 = tau1 in one element
    (SpikeAndSlab, dict(pi=t(0.5), tau0=t(0.1), tau1=t(math.inf))),
    (SpikeSlabPosterior, dict(loc=t(0.0), scale=t(0.0), logits=t(0.0))),
    (SpikeSlabPosterior, dict(loc=t(math.nan), scale=t(1.0), logits=t(0.0))),
    (SpikeSlabPosterior, dict(loc=t(0.0), scale=t(math.inf), logits=t(0.0))),
    (DiracSpikeSlab, dict(probs=t(1.5), loc=t(0.0), scale=t(1.0))),
    (DiracSpikeSlab, dict(probs=t(0.5), loc=t(0.0), scale=t(0.0))),
    (DiracSpikeSlab, dict(probs=t(0.5), loc=t(math.inf), scale=t(1.0))),
    (AdditiveNormal, dict(loc=t(0.0), log_sigma2=t(math.inf))),
    (AdditiveNormal, dict(loc=t(0.0), log_sigma2=t(-math.inf))),
    (AdditiveNormal, dict(loc=t(math.nan), log_sigma2=t(0.0))),
    (_BoundedCrossEntropy, dict(logits=t([0.0, 1.0]), min_prob=0.0)),
    (_BoundedCrossEntropy, dict(logits=t([0.0, 1.0]), min_prob=1.0)),
    (_BoundedCrossEntropy, dict(logits=t([0.0, math.nan]), min_prob=1e-3)),
]


@pytest.mark.parametrize(
    "make, params", BAD_PARAMETERS, ids=[f"{m.__name__}-{i}" for i, (m, _) in enumerate(BAD_PARAMETERS)]
)
def test_bad_parameters_are_refused(make, params):
    with pytest.raises(ValueError):
        make(**params, validate_args=True)
    make(**params, validate_args=False)  # and accepted when validation is off, as Pyro's are


BAD_VALUES = [
    (FIXTURES[0], t(math.nan)),
    (FIXTURES[2], t(math.nan)),
    (FIXTURES[3], t(math.nan)),
    (FIXTURES[5], t(math.nan)),
    (FIXTURES[6], t(1.5)),
    (FIXTURES[6], t(4.0)),
    (FIXTURES[6], t(-1.0)),
]


@pytest.mark.parametrize("fixture, value", BAD_VALUES, ids=[f"{f.name}-{v.item()}" for f, v in BAD_VALUES])
def test_bad_values_are_refused(fixture, value):
    with pytest.raises(ValueError):
        fixture.build(validate_args=True).log_prob(value)


@pytest.mark.parametrize("value", [math.nan, 0.0])
def test_log_uniform_refuses_values_outside_its_support(value):
    """The density 1/|w| is infinite at w = 0."""
    with pytest.raises(ValueError):
        LogUniform(dtype=DOUBLE, validate_args=True).expand([3]).log_prob(t(value))
    assert LogUniform(dtype=DOUBLE, validate_args=True).log_prob(t(-2.0)).item() == pytest.approx(-math.log(2.0))


def test_validation_survives_expand():
    d = SpikeAndSlab(t(0.5), t(0.1), t(1.0), validate_args=True).expand([3])
    with pytest.raises(ValueError):
        d.log_prob(t(math.nan))


# log_prob against its own normaliser and against samples.


def _elements(d):
    """Every batch element of ``d`` as a 0-dim-batch distribution (by indexing an expanded copy)."""
    for index in np.ndindex(*d.batch_shape):
        yield index, lambda x, index=index: math.exp(d.log_prob(t(x).expand(d.batch_shape))[index].item())


@fixtures(CONTINUOUS)
def test_continuous_log_prob_integrates_to_one(fixture):
    d = fixture.build()
    for index, density in _elements(d):
        mass = sum(
            integrate.quad(density, a, b, limit=200, points=[0.0] if a < 0 < b else None)[0]
            for a, b in [(-math.inf, -1.0), (-1.0, 1.0), (1.0, math.inf)]
        )
        assert mass == pytest.approx(1.0, abs=1e-6), index


@fixtures([f for f in FIXTURES if f.make is DiracSpikeSlab])
def test_dirac_spike_slab_mass_at_zero_and_slab_integrate_to_one(fixture):
    """exp(log_prob(0)) is the atom 1 − λ; exp(log_prob) elsewhere integrates to λ."""
    d = fixture.build()
    atom = d.log_prob(torch.zeros(d.batch_shape, dtype=DOUBLE)).exp()
    assert torch.allclose(atom, 1 - d.probs, atol=1e-12)
    for index, density in _elements(d):
        slab = integrate.quad(density, -math.inf, math.inf, points=None)[0]
        assert slab + atom[index].item() == pytest.approx(1.0, abs=1e-6), index


@fixtures([f for f in FIXTURES if f.make is not _BoundedCrossEntropy])
def test_samples_follow_log_prob(fixture):
    """The frequency of samples in a few intervals (and at 0, for the atom) matches the probability that
    log_prob gives them by quadrature, within 5 binomial standard errors."""
    d = fixture.build()
    n = 20000
    samples = d.sample((n,))
    edges = [-math.inf, -1.0, -0.2, 0.0, 0.3, 1.0, math.inf]
    for index, density in _elements(d):
        column = samples[(slice(None),) + index]
        nonzero = column[column != 0]
        if isinstance(d, DiracSpikeSlab):
            atom = 1 - d.probs[index].item() if d.batch_shape else 1 - d.probs.item()
            share = (column == 0).double().mean().item()
            assert abs(share - atom) <= 5 * math.sqrt(atom * (1 - atom) / n) + 1e-12
        for a, b in zip(edges, edges[1:]):
            expected = integrate.quad(density, a, b, limit=200)[0]
            observed = ((nonzero > a) & (nonzero <= b)).double().sum().item() / n
            assert abs(observed - expected) <= 5 * math.sqrt(max(expected * (1 - expected), 1e-6) / n), (index, a, b)


def test_bounded_cross_entropy_against_its_formula():
    """log_prob = log max(p_y, p_min) / log(1/p_min), p = softmax(logits), for every class and sample shape."""
    fixture = FIXTURES[-1]
    d = fixture.build()
    p_min = fixture.params["min_prob"]
    values = d.enumerate_support()
    expected = torch.log_softmax(fixture.params["logits"], -1).T.clamp_min(math.log(p_min)) / math.log(1 / p_min)
    assert torch.allclose(d.log_prob(values), expected, atol=1e-12)
    assert d.log_prob(values).min() >= -1.0 and d.log_prob(values).max() <= 0.0
    draws = d.sample((3, 5))
    assert torch.allclose(
        d.log_prob(draws), expected.T.expand(3, 5, 2, 4).gather(-1, draws.unsqueeze(-1)).squeeze(-1), atol=1e-12
    )
    # samples are the categorical's: their frequencies match softmax(logits)
    many = d.sample((20000,))
    frequencies = torch.stack([(many == k).double().mean(0) for k in range(4)], -1)
    probs = torch.softmax(fixture.params["logits"], -1)
    assert torch.all((frequencies - probs).abs() <= 5 * (probs * (1 - probs) / 20000).sqrt() + 1e-12)


# Registered KLs against Monte Carlo.


def _monte_carlo(integrand, n):
    return integrand.mean(0), integrand.std(0) / math.sqrt(n)


def test_kl_spike_slab_posterior_to_prior_against_monte_carlo():
    """KL(q(W)q(Z) ‖ π(W, Z)) of the joint, Z ~ Bernoulli(p) drawn beside W; batch shapes broadcast."""
    q = SpikeSlabPosterior(t([0.3, -1.0, 0.02]), t([0.2, 0.7, 0.05]), t([0.4, 2.0, -3.0]))
    p = SpikeAndSlab(t(0.3), t(0.1), t(1.5)).expand([3])
    n = 200000
    w = q.sample((n,))
    z = Bernoulli(probs=q.probs).sample((n,))
    tau = torch.where(z.bool(), p.tau1.expand_as(w), p.tau0.expand_as(w))
    log_prior = Bernoulli(probs=p.pi.expand_as(w)).log_prob(z) + Normal(0.0, tau).log_prob(w)
    estimate, error = _monte_carlo(q.log_prob(w) + Bernoulli(probs=q.probs).log_prob(z) - log_prior, n)
    kl = kl_divergence(q, p)
    assert kl.shape == (3,)
    assert torch.all((kl - estimate).abs() <= 5 * error), (kl, estimate, error)
    assert kl_divergence(q, SpikeAndSlab(t(0.3), t(0.1), t(1.5)).expand([2, 3])).shape == (2, 3)


def test_kl_dirac_spike_slab_against_monte_carlo():
    """KL of paper 000's appendix B.4 = E_q[log q − log p] in the measure δ₀ + Lebesgue that log_prob uses."""
    q = DiracSpikeSlab(t([0.3, 0.8, 1.0]), t([0.2, -1.0, 0.5]), t([0.4, 0.3, 1.2]))
    p = DiracSpikeSlab(t([0.5, 0.6, 1.0]), t([0.0, -0.5, 0.0]), t([1.0, 0.5, 1.0]))
    n = 200000
    w = q.sample((n,))
    estimate, error = _monte_carlo(q.log_prob(w) - p.log_prob(w), n)
    kl = kl_divergence(q, p)
    assert kl.shape == (3,)
    assert torch.all((kl - estimate).abs() <= 5 * error + 1e-12), (kl, estimate, error)


def test_kl_additive_normal_to_log_uniform_against_monte_carlo():
    """Eq. 14's KL against E_q[log q(w) + log|w|] minus its limit as α → ∞, −½ log(2πe) − (γ + log 2)/2
    (E log|ε| of a standard normal ε), within the approximation's stated accuracy (0.01) plus 5 SE."""
    log_alpha = t([-3.0, -1.0, 0.0, 1.0, 3.0])
    theta = t([0.5, -1.0, 2.0, 0.3, 1.0])
    q = AdditiveNormal(theta, log_alpha + torch.log(theta**2))
    p = LogUniform(dtype=DOUBLE).expand([5])
    n = 400000
    w = q.sample((n,))
    integrand = q.log_prob(w) - p.log_prob(w)
    estimate, error = _monte_carlo(integrand, n)
    limit = -0.5 * math.log(2 * math.pi * math.e) - 0.5 * (np.euler_gamma + math.log(2.0))
    kl = kl_divergence(q, p)
    assert kl.shape == (5,)
    assert torch.all((kl - (estimate - limit)).abs() <= 0.01 + 5 * error), (kl, estimate - limit, error)


def test_expanded_priors_keep_the_fused_spike_slab_posterior():
    """Expanded to weight-sized batches, a network's spike-and-slab priors still share 0-dim
    hyper-parameters, so the guide builds one fused network-wide posterior (one KL evaluation) and
    not a posterior per site."""
    model = BayesianNetwork(mlp((3,), 2, hidden=[4]), SpikeSlabPrior(pi=0.3, tau0=0.1, tau1=1.5), Categorical(10))
    for name, prior in model.site_priors().items():
        assert prior.base_dist.pi.shape == prior.base_dist.batch_shape, name
    posteriors = SpikeSlabGuide(model).posteriors()
    assert posteriors and all(q._segment is not None for q in posteriors.values())
