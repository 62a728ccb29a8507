"""The gate stage: weights and hard-concrete gates trained together under a MAC constraint.

The objective is Louizos et al. (2018)'s eq. 3 with the expectation of eqs. 10-12: the mean data loss
under one hard-concrete draw of every gate per step (the reparameterised gradient of eq. 11), plus the
expected-L0 term, here each unit's P(z ≠ 0) weighted by the MACs it costs: the expected MACs of the
gated network, r = E[MACs] / dense MACs (:class:`~bayesprune.core.unit_macs.ExpectedMacs`, exact
under independent gates). Instead of a fixed λ the term enters as the Lagrangian of the constraint
r = t (the form Wang, Wohlwend and Lei 2020 use for hard-concrete structured pruning):

    L = E_z[ℓ(x, y; W ⊙ z)] + λ1 (r − t) + λ2 (r − t)²,

minimised in the weights and log α and maximised in λ1, λ2 (gradient ascent), with t falling linearly
from 1 to the target over the first ``warmup`` of the steps. A λ1 > 0 is a per-unit L0 price
proportional to the unit's MACs: read as variational inference under a spike-and-slab prior (the
paper's relation of the L0 objective to it), prior log odds of a unit's presence of −λ1 · MACs_u / dense MACs.
"""

import torch
from torch import nn

from bayesprune.core.tasks import mean_loss
from bayesprune.methods.hard_concrete.gates import HardConcreteGates, open_probability
from bayesprune.methods.hard_concrete.program import ExpectedL0Lagrangian, gate_guide, gate_model


class Multipliers(nn.Module):
    """The Lagrange multipliers λ1, λ2 of the MAC constraint (trained by gradient ascent)."""

    def __init__(self):
        super().__init__()
        self.values = nn.Parameter(torch.zeros(2))

    def penalty(self, gap: torch.Tensor) -> torch.Tensor:
        return self.values[0] * gap + self.values[1] * gap**2


class GateStage:
    """One step of the gate stage on ``net`` (a loop step), and the numbers it records.

    Args:
        net: the network, trained in place.
        options: :class:`~bayesprune.methods.hard_concrete.options.HardConcreteOptions`.
        macs: the :class:`~bayesprune.core.unit_macs.ExpectedMacs` of ``net`` under ``gates``.
        gates: its :class:`HardConcreteGates`.
        lr: the weights' Adam rate.
        total_steps: the steps of the stage (for the target's warm-up).
        task: ``"classification"`` or ``"regression"``.
    """

    def __init__(self, net, options, macs, gates: HardConcreteGates, *, lr: float, total_steps: int, task: str):
        self.net, self.options, self.macs, self.gates = net, options, macs, gates
        self.loss = mean_loss(task)
        self.dense = macs.dense()
        self.multipliers = Multipliers().to(gates.raw.device)
        self.optimizer = torch.optim.Adam(
            [
                {"params": list(net.parameters()), "lr": lr},
                {"params": [gates.raw], "lr": options.gate_lr},
            ]
        )
        self.ascent = torch.optim.Adam(self.multipliers.parameters(), lr=options.multiplier_lr, maximize=True)
        self.total_steps, self.steps = max(total_steps, 1), 0
        self.expected_ratio = []  # per epoch: E[MACs] / dense at its end
        # the objective as a Pyro model and guide (:mod:`.program`): the gates a sample site, log α the guide's
        self.model = gate_model(net, gates, self.loss, gates.raw.detach().clone())
        self.guide = gate_guide(gates)
        self.objective = ExpectedL0Lagrangian(lambda probs: self.multipliers.penalty(self.ratio(probs) - self.target()))

    def target(self) -> float:
        warm = self.options.warmup * self.total_steps
        progress = 1.0 if warm == 0 else min(self.steps / warm, 1.0)
        return 1.0 - progress * (1.0 - self.options.macs)

    def ratio(self, probabilities=None) -> torch.Tensor:
        """E[MACs] / dense MACs under gates open with ``probabilities`` (P(z ≠ 0) of the current log α by default)."""
        if probabilities is None:
            probabilities = open_probability(self.gates.raw, self.gates.beta)
        return self.macs(self.gates.per_layer(probabilities)) / self.dense

    def step(self, x, y, index, num_batches):
        self.optimizer.zero_grad(set_to_none=True)
        self.ascent.zero_grad(set_to_none=True)
        data, penalty = self.objective.terms(self.model, self.guide, x, y)
        (data + penalty).backward()
        self.optimizer.step()
        self.ascent.step()
        self.steps += 1
        return data.detach()

    def on_epoch(self, epoch, history):
        with torch.no_grad():
            self.expected_ratio.append(float(self.ratio()))

    def state_dict(self) -> dict:
        return {
            "net": self.net.state_dict(),
            "log_alpha": self.gates.raw.detach().clone(),
            "multipliers": self.multipliers.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "ascent": self.ascent.state_dict(),
            "steps": self.steps,
            "expected_ratio": list(self.expected_ratio),
        }

    def load_state_dict(self, state: dict):
        self.net.load_state_dict(state["net"])
        with torch.no_grad():
            self.gates.raw.copy_(state["log_alpha"])
        self.multipliers.load_state_dict(state["multipliers"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.ascent.load_state_dict(state["ascent"])
        self.steps, self.expected_ratio = state["steps"], list(state["expected_ratio"])
