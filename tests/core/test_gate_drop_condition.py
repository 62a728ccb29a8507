"""Pruning condition (ii) of paper 004's Algorithm 1, step 4: a unit goes when θ has fallen by θ_per below
its running maximum, and only "after the first n0 training iterations" (section 6). The oracle is that
sentence counted by hand: with n0 = 3, a unit whose θ lies 20% below its maximum from the start is still
in the network after steps 1, 2 and 3 and leaves at step 4, not at step 3 (an implementation that
applies the rule one step early fails here)."""

import pytest
import torch
from torch import nn

from bayesprune.methods.unit_gates import GateTraining, UnitGatesOptions


def training(n0: int) -> tuple:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 6), nn.Tanh(), nn.Linear(6, 3))
    generator = torch.Generator().manual_seed(1)
    batch = torch.randn(32, 5, generator=generator), torch.randint(0, 3, (32,), generator=generator)
    # lr 1e-6: no step moves θ by more than ~1e-6, so where θ stands relative to θ_max (1 − θ_per) is set below
    fit = GateTraining(net, UnitGatesOptions(condition="drop", theta_per=0.1, n0=n0), num_train=100, lr=1e-6)
    with torch.no_grad():
        fit.gates.theta[0][[2, 5]] = 0.4  # θ_max = θ(0) = 0.5: 0.4 < 0.5 (1 − 0.1) = 0.45
        fit.gates.theta[1][0] = 0.46  # 8% below: never removed
    return fit, batch


@pytest.mark.parametrize("n0", [0, 1, 3])
def test_condition_ii_removes_a_unit_at_the_first_step_after_n0(n0):
    fit, (x, y) = training(n0)
    for step in range(1, n0 + 1):  # steps 1..n0: the rule is not applied yet
        fit.step(x, y, step - 1, 10)
        assert fit.kept_units[0].tolist() == list(range(7)), f"a unit left at step {step} <= n0 = {n0}"
    fit.step(x, y, n0, 10)  # step n0 + 1
    assert fit.kept_units[0].tolist() == [0, 1, 3, 4, 6]
    assert fit.kept_units[1].tolist() == list(range(6))


def test_the_running_maximum_is_the_reference_not_the_starting_value():
    """θ that first rises to 0.8 and then falls to 0.7 (below 0.8 · 0.9 = 0.72, above 0.5 · 0.9) goes."""
    fit, (x, y) = training(n0=1)
    with torch.no_grad():
        fit.gates.theta[1][3] = 0.8
    fit.step(x, y, 0, 10)  # step 1 (= n0): θ_max of that unit becomes 0.8
    assert fit.kept_units[1].tolist() == list(range(6))
    with torch.no_grad():
        fit.gates.theta[1][3] = 0.7
    fit.step(x, y, 1, 10)
    assert fit.kept_units[1].tolist() == [0, 1, 2, 4, 5]
