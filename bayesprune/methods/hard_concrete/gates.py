"""Hard-concrete gates on a network's unit groups (Louizos, Welling and Kingma 2018, "Learning sparse
neural networks through L0 regularization", ICLR), and the cut of the learned gates to a MAC target.

Each unit u of :class:`~bayesprune.core.gates.UnitGates`' groups (channels coupled by residual
additions and batch norms, attention heads, MLP neurons) has a gate z_u drawn from the hard-concrete
distribution with location log α_u, temperature β and stretch (γ, ζ) = (−0.1, 1.1) (the paper's
values, section 4):

    u ~ U(0, 1),  s = σ((log u − log(1 − u) + log α) / β),  s̄ = s (ζ − γ) + γ,  z = min(1, max(0, s̄))   (eqs. 10-11)

so that z is exactly 0 with positive probability, and the probability that the gate is open is

    P(z ≠ 0) = σ(log α − β log(−γ/ζ))                                                              (eq. 12)

the term of the expected-L0 penalty. At test time the gate is ẑ = min(1, max(0, σ(log α)(ζ − γ) + γ))
(the paper's test-time estimator, eq. 13). The constants and β = 2/3 are those of its experiments.
"""

import math

import torch
from torch import nn

from bayesprune.core.gates import UnitGates

#: The stretch interval (γ, ζ) of the hard-concrete distribution (the values of Louizos et al. 2018's experiments).
GAMMA, ZETA = -0.1, 1.1


def open_probability(log_alpha: torch.Tensor, beta: float) -> torch.Tensor:
    """P(z ≠ 0) of eq. 12: the expected L0 contribution of each gate."""
    return torch.sigmoid(log_alpha - beta * math.log(-GAMMA / ZETA))


def sample_gates(log_alpha: torch.Tensor, beta: float) -> torch.Tensor:
    """One hard-concrete draw per gate (eqs. 10-11), differentiable in ``log_alpha``."""
    u = torch.rand_like(log_alpha).clamp(1e-6, 1 - 1e-6)
    s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha) / beta)
    return (s * (ZETA - GAMMA) + GAMMA).clamp(0.0, 1.0)


def test_gates(log_alpha: torch.Tensor) -> torch.Tensor:
    """The deterministic test-time gate ẑ = min(1, max(0, σ(log α)(ζ − γ) + γ)) (eq. 13)."""
    return (torch.sigmoid(log_alpha) * (ZETA - GAMMA) + GAMMA).clamp(0.0, 1.0)


def kept_gate_values(log_alpha: torch.Tensor, beta: float, draws: int = 1024) -> torch.Tensor:
    """The value each gate takes in the cut network: the test-time ẑ, and where ẑ is 0 (a unit the cut keeps
    though its gate is mostly closed: the MAC target lies above the gates' expected MACs) its mean E[z] over
    ``draws`` hard-concrete draws, the scale it had on average while training; ẑ = 0 there would keep the
    unit's MACs and remove what it computes."""
    mean = sample_gates(log_alpha.expand(draws, -1).clone(), beta).mean(0)
    hat = test_gates(log_alpha)
    return torch.where(hat > 0, hat, mean)


def log_alpha_for(probability: float, beta: float) -> float:
    """The log α whose gate is open with ``probability`` (eq. 12 inverted)."""
    return math.log(probability) - math.log1p(-probability) + beta * math.log(-GAMMA / ZETA)


class HardConcreteGates(UnitGates):
    """:class:`~bayesprune.core.gates.UnitGates` whose trained vector :attr:`raw` holds log α of every unit
    (all groups end to end), the keep-probabilities being P(z ≠ 0) of eq. 12.

    Args:
        net: the network (the group feeding its output has no gate).
        init_open: P(z ≠ 0) of every gate at the start.
        beta: the temperature β.
        input_shape: one input's shape.
    """

    parameterization = "log-alpha"

    def __init__(self, net: nn.Module, *, init_open: float, beta: float, input_shape=None):
        super().__init__(net, init=log_alpha_for(init_open, beta), input_shape=input_shape)
        self.beta = beta

    def keep_probabilities(self) -> list:
        return [open_probability(self.raw, self.beta)]

    def logits(self) -> dict:
        return self._to_sites([self.raw.detach().double() - self.beta * math.log(-GAMMA / ZETA)])


@torch.no_grad()
def fold_gates(net: nn.Module, gates: UnitGates, values: list):
    """Multiply, in place, every gated unit's input columns in each consumer by its gate value in ``values``
    (one tensor per group): ``net`` then computes what ``gates.applied(net, values)`` computes."""
    for name, reader in gates.readers.items():
        weight = net.get_submodule(name).weight
        scale = gates.scale(reader, values).to(weight.dtype)
        if reader.channel_dim == 1:
            weight.mul_(scale.view(1, -1, *([1] * (weight.dim() - 2))))
        else:
            weight.mul_(scale)
