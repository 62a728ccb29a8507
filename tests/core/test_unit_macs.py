"""Expected MACs under independent unit gates (bayesprune.core.unit_macs.ExpectedMacs) against brute-force
enumeration: every subset of kept units, weighted by its probability, times the count of the physically
smaller network (bayesprune.core.export.count_macs)."""

import itertools

import pytest
import torch
from torch import nn

from bayesprune.core.export import count_macs
from bayesprune.core.gates import UnitGates
from bayesprune.core.structure import shrunk
from bayesprune.core.unit_macs import ExpectedMacs


class Tiny(nn.Module):
    """stem → residual block with a depthwise convolution → strided conv → linear: units coupled by the
    addition, a depthwise group, a plain group (2 + 3 + 2 units)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 2, 3, padding=1), nn.BatchNorm2d(2), nn.ReLU())
        self.expand = nn.Conv2d(2, 3, 1)
        self.depthwise = nn.Conv2d(3, 3, 3, padding=1, groups=3)
        self.project = nn.Conv2d(3, 2, 1)
        self.down = nn.Conv2d(2, 2, 3, stride=2)
        self.head = nn.Linear(2 * 2 * 2, 3)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.project(torch.relu(self.depthwise(torch.relu(self.expand(x)))))
        return self.head(torch.relu(self.down(x)).flatten(1))


SHAPE = (3, 6, 6)


def test_expected_macs_is_the_enumerated_expectation():
    """Each group's first unit always kept (p = 1), the others kept with their own probabilities: E[MACs]
    equals Σ over every kept subset of P(subset) · count_macs(network without the other units), and the
    gradient reaches every free probability."""
    torch.manual_seed(0)
    net = Tiny().eval()
    gates = UnitGates(net, input_shape=SHAPE)
    assert sorted(gates.units) == [2, 2, 3]
    generator = torch.Generator().manual_seed(1)
    probs = [
        torch.cat([torch.ones(1), 0.2 + 0.7 * torch.rand(u - 1, generator=generator)]).double() for u in gates.units
    ]
    leaves = [p.clone().requires_grad_(True) for p in probs]
    expected = ExpectedMacs(net, gates)(leaves)
    expected.backward()
    assert all((leaf.grad[1:] != 0).all() for leaf in leaves)
    free = [(g, i) for g, u in enumerate(gates.units) for i in range(1, u)]
    oracle = 0.0
    for bits in itertools.product([False, True], repeat=len(free)):
        keep = [torch.arange(u) == 0 for u in gates.units]
        weight = 1.0
        for (g, i), kept in zip(free, bits):
            keep[g][i] = kept
            weight *= float(probs[g][i]) if kept else 1 - float(probs[g][i])
        smaller, _ = shrunk(net, dict(zip(gates.sites, keep)), input_shape=SHAPE)
        oracle += weight * count_macs(smaller, SHAPE)
    assert float(expected.detach()) == pytest.approx(oracle, rel=1e-9, abs=1e-6)
    assert oracle < count_macs(net, SHAPE)
