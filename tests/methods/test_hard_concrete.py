"""Hard-concrete unit gates under a MAC budget: each piece against an independent oracle."""

import copy

import pytest
import torch
from torch import nn

from bayesprune.core.export import count_macs
from bayesprune.core.gates import UnitGates, separable_heads
from bayesprune.core.optim import OptimConfig
from bayesprune.core.structure import shrunk
from bayesprune.core.unit_macs import ExpectedMacs, cut_to_macs
from bayesprune.data.registry import Dataset
from bayesprune.methods.context import FitContext
from bayesprune.methods.hard_concrete import HardConcreteMethod, HardConcreteOptions, learned_network
from bayesprune.methods.hard_concrete.gates import (
    GAMMA,
    ZETA,
    HardConcreteGates,
    fold_gates,
    kept_gate_values,
    open_probability,
    sample_gates,
)


class Block(nn.Module):
    """A residual block with a depthwise convolution: units coupled by the addition, and a depthwise group."""

    def __init__(self, channels):
        super().__init__()
        self.expand = nn.Conv2d(channels, 2 * channels, 1)
        self.depthwise = nn.Conv2d(2 * channels, 2 * channels, 3, padding=1, groups=2 * channels)
        self.project = nn.Conv2d(2 * channels, channels, 1)

    def forward(self, x):
        return x + self.project(torch.relu(self.depthwise(torch.relu(self.expand(x)))))


def small_cnn():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        Block(6),
        nn.Conv2d(6, 8, 3, stride=2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 3 * 3, 12),
        nn.ReLU(),
        nn.Linear(12, 4),
    ).eval()


SHAPE = (3, 8, 8)


def test_open_probability_is_the_share_of_draws_that_are_not_zero():
    torch.manual_seed(0)
    log_alpha = torch.tensor([-3.0, -1.0, 0.0, 0.5, 2.0])
    draws = sample_gates(log_alpha.expand(200_000, -1).clone(), 2 / 3)
    share = (draws > 0).double().mean(0)
    assert torch.allclose(share, open_probability(log_alpha, 2 / 3).double(), atol=0.005)
    assert float(draws.min()) == 0.0 and float(draws.max()) == 1.0  # the stretched gate hits both ends


def tiny_vit():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    net = torchvision.models.VisionTransformer(
        image_size=8, patch_size=4, num_layers=2, num_heads=2, hidden_dim=8, mlp_dim=12, num_classes=3
    )
    return separable_heads(net, SHAPE).eval()


@pytest.mark.parametrize("build", [small_cnn, tiny_vit])
def test_expected_macs_at_zero_one_are_the_smaller_networks_count(build):
    net = build()
    gates = UnitGates(net, input_shape=SHAPE)
    macs = ExpectedMacs(net, gates)
    assert macs.dense() == pytest.approx(count_macs(net, SHAPE), abs=0.5)
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        keep = [torch.rand(units, generator=generator) < 0.5 for units in gates.units]
        for k in keep:
            k[0] = True
        smaller, _ = shrunk(net, dict(zip(gates.sites, keep)), input_shape=SHAPE)
        assert float(macs([k.float() for k in keep])) == pytest.approx(count_macs(smaller, SHAPE), abs=0.5)


def test_a_kept_unit_whose_test_gate_is_zero_keeps_its_mean_gate():
    import numpy as np

    log_alpha = torch.tensor([-4.0, -2.5, 1.0, 4.0])
    torch.manual_seed(0)
    values = kept_gate_values(log_alpha, 2 / 3, draws=200_000)
    u = (np.arange(1_000_000) + 0.5) / 1_000_000  # E[z] = ∫ z(u) du, midpoint rule
    for value, a in zip(values.tolist(), log_alpha.tolist()):
        hat = min(1.0, max(0.0, (ZETA - GAMMA) / (1 + np.exp(-a)) + GAMMA))
        s = 1 / (1 + np.exp(-(np.log(u) - np.log1p(-u) + a) / (2 / 3)))
        mean = np.clip(s * (ZETA - GAMMA) + GAMMA, 0, 1).mean()
        assert value == pytest.approx(hat if hat > 0 else mean, abs=2e-3)
    assert 0 < values[0] < 0.1  # closed at test time, open in a few draws


def test_expected_macs_is_the_monte_carlo_mean_of_the_smaller_networks_counts():
    net = small_cnn()
    gates = UnitGates(net, input_shape=SHAPE)
    macs = ExpectedMacs(net, gates)
    generator = torch.Generator().manual_seed(2)
    p = [0.3 + 0.6 * torch.rand(units, generator=generator) for units in gates.units]
    counts = []
    for _ in range(300):
        keep = [torch.bernoulli(q, generator=generator).bool() for q in p]
        counts.append(float(macs([k.float() for k in keep])))  # exact per draw (the test above)
    mean = sum(counts) / len(counts)
    spread = torch.tensor(counts).std().item() / len(counts) ** 0.5
    assert abs(float(macs(p)) - mean) < 4 * spread


def test_folded_gates_compute_the_gated_network():
    net = small_cnn()
    gates = UnitGates(net, input_shape=SHAPE)
    values = [torch.rand(units) for units in gates.units]
    x = torch.randn(5, *SHAPE)
    with torch.no_grad(), gates.applied(net, values):
        expected = net(x)
    folded = copy.deepcopy(net)
    fold_gates(folded, gates, values)
    with torch.no_grad():
        assert torch.allclose(folded(x), expected, atol=1e-5)


def test_the_cut_keeps_the_most_units_by_score_that_fit_the_target():
    net = small_cnn()
    gates = UnitGates(net, input_shape=SHAPE)
    macs = ExpectedMacs(net, gates)
    scores = [torch.randn(units, generator=torch.Generator().manual_seed(i)) for i, units in enumerate(gates.units)]
    target = 0.5 * count_macs(net, SHAPE)
    keep = cut_to_macs(scores, macs, target, [1] * len(scores))
    # brute force: units by descending score, each group's best always kept, the longest prefix that fits
    flat = torch.cat(scores)
    order = flat.argsort(descending=True)
    best = None
    for count in range(1, len(flat) + 1):
        chosen = torch.zeros(len(flat), dtype=torch.bool)
        chosen[order[:count]] = True
        masks = list(chosen.split(gates.units))
        masks = [m | (s == s.max()) for m, s in zip(masks, scores)]
        smaller, _ = shrunk(net, dict(zip(gates.sites, masks)), input_shape=SHAPE)
        if count_macs(smaller, SHAPE) <= target:
            best = masks
    assert best is not None
    assert all(torch.equal(a, b) for a, b in zip(keep, best))


def test_the_learned_network_computes_the_gated_network_with_the_cut_units_closed():
    net = small_cnn()
    options = HardConcreteOptions(macs=0.6)
    gates = HardConcreteGates(net, init_open=0.9, beta=2 / 3, input_shape=SHAPE)
    with torch.no_grad():
        gates.raw.copy_(torch.randn(gates.raw.shape, generator=torch.Generator().manual_seed(3)) * 3)
    macs = ExpectedMacs(net, gates)
    x = torch.randn(4, *SHAPE)
    gated = copy.deepcopy(net)
    torch.manual_seed(5)
    smaller, kept, keep = learned_network(net, gates, macs, options)
    torch.manual_seed(5)
    folded = kept_gate_values(gates.raw.detach(), gates.beta)
    values = [z * k for z, k in zip(gates.per_layer(folded), keep)]
    with torch.no_grad(), gates.applied(gated, values):
        expected = gated(x)
    with torch.no_grad():
        assert torch.allclose(smaller(x), expected, atol=1e-5)
    assert count_macs(smaller, SHAPE) <= 0.6 * count_macs(gated, SHAPE)
    assert [len(v) for v in kept.values()] == [int(k.sum()) for k in keep]


def teacher_problem(n=600):
    """Labels from 3 hidden units of a teacher; a student of 12 hidden units holding the teacher's 3 and 9
    others of the same norms that only add noise to the logits."""
    generator = torch.Generator().manual_seed(0)
    w1 = torch.randn(12, 8, generator=generator)
    w2 = torch.randn(3, 12, generator=generator)
    w2[:, 3:] *= 0.8
    x = torch.randn(n, 8, generator=generator)
    y = (torch.relu(x @ w1[:3].T) @ w2[:, :3].T).argmax(1)
    student = nn.Sequential(nn.Linear(8, 12, bias=False), nn.ReLU(), nn.Linear(12, 3, bias=False))
    with torch.no_grad():
        student[0].weight.copy_(w1)
        student[2].weight.copy_(w2)
    return student, Dataset("teacher", "classification", x, y, x, y, (8,), 3)


def test_the_gates_keep_the_useful_units_and_drop_the_rest():
    torch.set_num_threads(1)
    net, data = teacher_problem()
    with torch.no_grad():
        dense_error = float((net(data.x_train).argmax(1) != data.y_train).float().mean())
    assert dense_error > 0.2  # the noise units hurt: magnitude alone cannot tell them apart
    options = HardConcreteOptions(macs=3 / 12 + 0.01, gate_lr=0.1, warmup=0.3, min_keep_fraction=0.0)
    ctx = FitContext(seed=0, epochs=30, batch_size=60, optim=OptimConfig(lr=1e-4))
    fitted = HardConcreteMethod().fit(net, data, options, ctx)
    assert fitted.report["learned_architecture"] == [3]
    kept = fitted.net[0].weight.detach()
    teacher = teacher_problem()[0][0].weight.detach()[:3]
    assert torch.allclose(kept.sort(0).values, teacher.sort(0).values, atol=0.05)


@pytest.mark.parametrize("key, value", [("macs", 1.0), ("macs", 0.0), ("beta", -1.0), ("warmup", 1.0)])
def test_bad_options_are_refused_naming_the_key(key, value):
    from bayesprune.core.errors import ConfigError

    with pytest.raises(ConfigError, match=f"hard-concrete.{key}"):
        HardConcreteOptions(**{key: value})
