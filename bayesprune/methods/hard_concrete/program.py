"""The gate stage's objective as a Pyro model and its matching guide (Louizos, Welling and Kingma 2018).

The gates are one Pyro sample site, ``gates``, under the hard-concrete distribution (:class:`HardConcrete`,
eqs. 10-11): the guide draws them with its parameters log α (the gates' trained vector), the model runs the
network under them and observes the data through a factor, its minibatch's mean loss. :class:`ExpectedL0Lagrangian`
is the ELBO of that pair with the latent term eq. 3 gives the L0 objective: in place of a KL, a penalty of the
guide's open probabilities P(z ≠ 0) (eq. 12), here the Lagrangian of the expected MACs
(:mod:`~bayesprune.methods.hard_concrete.training`). With one draw per step it is the hand-written step's
objective, the same numbers on the same seed (the guide consumes the random numbers that step did).

The model's prior on the gates is the hard-concrete at the starting log α; the objective never reads its
density (the hard-concrete has atoms at 0 and 1, so it has none with respect to Lebesgue measure): as in
the paper, the L0 term replaces the KL.
"""

import pyro
import torch
from pyro import poutine
from pyro.distributions import TorchDistribution
from pyro.infer import ELBO
from torch.distributions import constraints

from bayesprune.core.objectives import latent_sites
from bayesprune.core.precision import autocast_calls
from bayesprune.methods.hard_concrete.gates import HardConcreteGates, open_probability, sample_gates


class HardConcrete(TorchDistribution):
    """The hard-concrete distribution of location ``log_alpha`` and temperature ``beta`` (eqs. 10-11),
    stretched to (γ, ζ) and clamped to [0, 1]; reparameterised draws, no density (atoms at 0 and 1)."""

    arg_constraints = {"log_alpha": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, log_alpha: torch.Tensor, beta: float, validate_args=None):
        self.log_alpha, self.beta = log_alpha, beta
        super().__init__(log_alpha.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return HardConcrete(self.log_alpha.expand(batch_shape), self.beta)

    @property
    def open_probability(self) -> torch.Tensor:
        """P(z ≠ 0) of every gate (eq. 12)."""
        return open_probability(self.log_alpha, self.beta)

    def rsample(self, sample_shape=torch.Size()):
        return sample_gates(self.log_alpha.expand(self._extended_shape(sample_shape)), self.beta)

    def log_prob(self, value):
        raise NotImplementedError("the hard-concrete has atoms at 0 and 1: its objective reads P(z != 0), eq. 12")


def gate_model(net, gates: HardConcreteGates, loss, prior_log_alpha: torch.Tensor):
    """The model: gates ~ HardConcrete(``prior_log_alpha``, β), the network ``net`` under them, and the factor
    −``loss``(net(x), y) (its minibatch mean, under ``train.precision``)."""

    def model(x, y):
        z = pyro.sample("gates", HardConcrete(prior_log_alpha, gates.beta))
        with gates.applied(net, gates.per_layer(z)):
            data = autocast_calls(lambda x, y: loss(net(x), y), x.device)(x, y)
        pyro.factor("data", -data)

    return model


def gate_guide(gates: HardConcreteGates):
    """The guide: gates ~ HardConcrete(log α, β), log α the trained vector of ``gates``."""

    def guide(x, y):
        pyro.sample("gates", HardConcrete(gates.raw, gates.beta))

    return guide


class ExpectedL0Lagrangian(ELBO):
    """−E_q[log p(D | z)] by one draw of the guide, plus ``penalty`` of the guide's open probabilities
    (eq. 3 with eq. 12: the expected-L0 term in place of a KL).

    Args:
        penalty: P(z ≠ 0) of the guide's gates → the 0-dim latent term.
    """

    def __init__(self, penalty):
        super().__init__(num_particles=1)
        self.penalty = penalty

    def _get_trace(self, model, guide, args, kwargs):
        guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
        return poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs), guide_trace

    def terms(self, model, guide, *args, **kwargs) -> tuple:
        """(data term, latent term) of one draw, both differentiable."""
        model_trace, guide_trace = self._get_trace(model, guide, args, kwargs)
        data = -sum(
            site["fn"].log_prob(site["value"]).sum()
            for site in model_trace.nodes.values()
            if site["type"] == "sample" and site["is_observed"]
        )
        (_, gates), *others = latent_sites(guide_trace)
        if others:
            raise ValueError(f"{type(self).__name__} reads one latent site, the gates; the guide has {1 + len(others)}")
        return data, self.penalty(gates["fn"].open_probability)

    def differentiable_loss(self, model, guide, *args, **kwargs):
        return sum(self.terms(model, guide, *args, **kwargs))

    def loss(self, model, guide, *args, **kwargs):
        with torch.no_grad():
            return self.differentiable_loss(model, guide, *args, **kwargs).item()

    def loss_and_grads(self, model, guide, *args, **kwargs):
        loss = self.differentiable_loss(model, guide, *args, **kwargs)
        loss.backward()
        return loss.detach()
