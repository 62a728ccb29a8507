"""Hard-concrete's objective as a Pyro model and guide: the distribution's atoms against their closed forms,
and the gate stage's Pyro step against the hand-written torch step on one seed, number for number."""

import copy
import math

import pytest
import torch
from torch import nn

from bayesprune.core.tasks import mean_loss
from bayesprune.core.unit_macs import ExpectedMacs
from bayesprune.methods.hard_concrete import HardConcreteOptions
from bayesprune.methods.hard_concrete.gates import GAMMA, ZETA, HardConcreteGates, open_probability, sample_gates
from bayesprune.methods.hard_concrete.program import HardConcrete
from bayesprune.methods.hard_concrete.training import GateStage


def test_the_hard_concrete_is_zero_and_one_as_often_as_its_closed_forms_say():
    """P(z ≠ 0) = σ(log α − β log(−γ/ζ)) (eq. 12) and P(z = 1) = σ(log α − β log((1 − γ)/(ζ − 1))), from
    s̄ = σ((L + log α)/β)(ζ − γ) + γ with L logistic."""
    torch.manual_seed(0)
    beta, log_alpha = 2 / 3, torch.tensor([-2.0, 0.0, 1.5])
    draws = HardConcrete(log_alpha, beta).rsample((200_000,))
    assert ((draws >= 0) & (draws <= 1)).all()
    assert (draws != 0).double().mean(0) == pytest.approx(open_probability(log_alpha, beta).double(), abs=4e-3)
    at_one = torch.sigmoid(log_alpha - beta * math.log((1 - GAMMA) / (ZETA - 1)))
    assert (draws == 1).double().mean(0) == pytest.approx(at_one.double(), abs=4e-3)


def torch_step(stage: GateStage, x, y):
    """The gate stage's step written out in torch: one draw of the gates (eqs. 10-11), the mean loss under
    them, plus the Lagrangian of the expected MACs of eq. 12's open probabilities."""
    gates = stage.gates
    z = sample_gates(gates.raw, gates.beta)
    stage.optimizer.zero_grad(set_to_none=True)
    stage.ascent.zero_grad(set_to_none=True)
    with gates.applied(stage.net, gates.per_layer(z)):
        data = mean_loss("classification")(stage.net(x), y)
    ratio = stage.macs(gates.per_layer(open_probability(gates.raw, gates.beta))) / stage.dense
    (data + stage.multipliers.penalty(ratio - stage.target())).backward()
    stage.optimizer.step()
    stage.ascent.step()
    stage.steps += 1
    return data.detach()


def stage_of(net):
    gates = HardConcreteGates(net, init_open=0.9, beta=2 / 3, input_shape=(8,))
    options = HardConcreteOptions(macs=0.4, warmup=0.5)
    return GateStage(net, options, ExpectedMacs(net, gates), gates, lr=0.01, total_steps=6, task="classification")


def test_the_pyro_step_gives_the_torch_steps_numbers_on_one_seed():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 10), nn.ReLU(), nn.Linear(10, 3))
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    pyro_stage, torch_stage = stage_of(net), stage_of(copy.deepcopy(net))
    for step in range(4):
        torch.manual_seed(step)
        pyro_loss = pyro_stage.step(x, y, 0, 1)
        torch.manual_seed(step)
        torch_loss = torch_step(torch_stage, x, y)
        assert torch.equal(pyro_loss, torch_loss)
    assert torch.equal(pyro_stage.gates.raw, torch_stage.gates.raw)
    assert torch.equal(pyro_stage.multipliers.values, torch_stage.multipliers.values)
    assert pyro_stage.multipliers.values.abs().sum() > 0  # the constraint acted
    for mine, theirs in zip(pyro_stage.net.parameters(), torch_stage.net.parameters()):
        assert torch.equal(mine, theirs)
