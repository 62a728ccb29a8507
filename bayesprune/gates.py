"""Bernoulli gates on the hidden units (filters) of a layer chain, and estimators of C1 − C0 (paper 004, section 3).

Unit j of a hidden layer carries ξ ~ Bernoulli(θ_j); eq. 1 multiplies the unit's output by ξ where
the next layer reads it (ζ^l = W^l (z^l ⊙ ξ^l)), so :meth:`UnitGates.applied` scales the consumer's
input columns (a flattened channel's H·W columns together, :mod:`bayesprune.structure`). The data
part of ∂L/∂θ (eq. 19) is C1 − C0, the change in the total cost when the unit is switched on; an
:class:`Estimator` draws the gate values of one step and estimates it:

* :class:`Taylor`: first order around the sample (eq. 22), the straight-through estimator;
* :class:`Concrete`: the relaxed gate of temperature t and the path derivative ∂C/∂θ (eq. 23);
* :class:`Exact`: two passes per unit, switching it with every other gate kept (eq. 25);
* :class:`Hybrid`: Taylor, with the exact difference for the units of largest weights (section 3.3.4).
"""
import itertools
from contextlib import contextmanager

import torch
from torch import nn

from .structure import layer_chain


class UnitGates(nn.Module):
    """θ of every hidden unit of ``net``'s layer chain (one parameter vector per hidden layer).

    Args:
        net: a plain chain (:func:`bayesprune.structure.layer_chain`); its last layer has no gate.
        init: θ(0) of every unit (0.5 in the paper).
        input_shape: one input's shape, to check a convolutional chain's forward.
    """

    def __init__(self, net: nn.Module, *, init: float = 0.5, input_shape=None):
        super().__init__()
        self.layers = layer_chain(net, input_shape)[:-1]
        self.theta = nn.ParameterList([nn.Parameter(torch.full((layer.units,), float(init), device=layer.module.weight.device))
                                       for layer in self.layers])

    @property
    def sites(self) -> list:
        """``"<layer>.gate"`` of every gated layer, in order."""
        return [layer.gate_site for layer in self.layers]

    def consumers(self, net) -> list:
        """The module of the next weighted layer of each gated layer, looked up in ``net``."""
        return [net.get_submodule(layer.consumer) for layer in self.layers]

    @contextmanager
    def applied(self, net: nn.Module, values: list):
        """Within the block, ``net`` multiplies each gated unit's output by its value in ``values``."""
        def gate(value, per_unit):
            def hook(module, args):
                x = args[0]
                if x.dim() > 2:
                    scale = value.view(1, -1, *([1] * (x.dim() - 2)))
                else:
                    scale = value if per_unit == 1 else value.repeat_interleave(per_unit)
                return (x * scale.to(x.dtype),)
            return hook

        handles = [module.register_forward_pre_hook(gate(value, layer.inputs_per_unit))
                   for module, layer, value in zip(self.consumers(net), self.layers, values)]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()


def unit_weight_norms(net: nn.Module, gates: UnitGates) -> list:
    """‖w_b‖² + ‖w_f‖² of every gated unit: its fan-in weights and bias, and its fan-out columns in
    the next layer (Fig. 1), the quantity Algorithm 1 bounds by 2 φ_max."""
    norms = []
    for layer, consumer in zip(gates.layers, gates.consumers(net)):
        fan_in = layer.module.weight.detach().flatten(1).pow(2).sum(1)
        if layer.module.bias is not None:
            fan_in = fan_in + layer.module.bias.detach().pow(2)
        fan_out = consumer.weight.detach().transpose(0, 1).flatten(1).pow(2).sum(1)
        if fan_out.numel() != fan_in.numel():  # a flattened channel owns a block of columns
            fan_out = fan_out.view(fan_in.numel(), -1).sum(1)
        norms.append(fan_in + fan_out)
    return norms


@torch.no_grad()
def project_unit_weights(net: nn.Module, gates: UnitGates, phi_max: float):
    """Scale each unit's fan-in and fan-out weights so that ‖w_b‖² + ‖w_f‖² ≤ 2 φ_max (Algorithm 1, step 11)."""
    for layer, consumer, norm in zip(gates.layers, gates.consumers(net), unit_weight_norms(net, gates)):
        scale = torch.sqrt((2 * phi_max / norm.clamp_min(1e-30)).clamp(max=1.0))
        if bool((scale < 1).any()):
            shape = (-1, *([1] * (layer.module.weight.dim() - 1)))
            layer.module.weight.mul_(scale.view(shape))
            if layer.module.bias is not None:
                layer.module.bias.mul_(scale)
            columns = scale.repeat_interleave(consumer.weight.shape[1] // scale.numel())
            consumer.weight.mul_(columns.view(1, -1, *([1] * (consumer.weight.dim() - 2))))


class Estimator:
    """Draws one step's gate values and estimates ∂C/∂θ (eq. 19's C1 − C0) for every unit.

    ``values(theta)`` returns the gate values the forward pass uses; after ``cost.backward()``,
    ``data_gradient(theta, values, cost_of)`` returns the estimate per gated layer, where
    ``cost_of(values)`` recomputes the minibatch cost (N/B)·Σ −log p without gradients.
    """

    def values(self, theta: list) -> list:
        raise NotImplementedError

    def data_gradient(self, theta: list, values: list, cost_of, norms=None) -> list:
        raise NotImplementedError


def relaxed_bernoulli(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """A Concrete(θ, 1 − θ) draw of temperature t for θ = sigmoid(``logits``): σ((logit θ − logit u) / t)
    with u ~ U(0, 1), the two-class Gumbel-softmax relaxation of a Bernoulli(θ) gate (paper 004, eq. 23;
    paper 000, appendix B.3). As t → 0 it is 1 with probability θ."""
    u = torch.rand_like(logits).clamp(1e-7, 1 - 1e-7)
    return torch.sigmoid((logits - torch.log(u) + torch.log1p(-u)) / temperature)


def bernoulli_sample(theta: list) -> list:
    return [torch.bernoulli(t.detach()) for t in theta]


class Taylor(Estimator):
    """Eq. 22: C1 − C0 ≈ (N/B) Σ_i z_i δ_{f,i}ᵀ w_f, the derivative of the cost in the gate value at the
    sample (the straight-through estimator); unbiased as the unit's weights go to zero."""

    def values(self, theta):
        return [sample.requires_grad_() for sample in bernoulli_sample(theta)]

    def data_gradient(self, theta, values, cost_of, norms=None):
        return [value.grad.detach() for value in values]


class Concrete(Estimator):
    """Eq. 23: the relaxed gate ξ(θ, u) = 1 − σ((log(1 − θ) − log θ + log u − log(1 − u)) / t) in the
    forward pass, and ∂C/∂θ through it by the chain rule (one u per unit and step)."""

    def __init__(self, temperature: float = 0.1):
        self.temperature = temperature

    def values(self, theta):
        return [relaxed_bernoulli(torch.log(t) - torch.log1p(-t), self.temperature) for t in theta]

    def data_gradient(self, theta, values, cost_of, norms=None):
        return [t.grad.detach().clone() for t in theta]


class Exact(Estimator):
    """Eq. 25: C1 − C0 from two evaluations of the minibatch cost per unit, the unit switched on and
    off and every other gate at its sample: M + 1 forward passes for M units."""

    def values(self, theta):
        return bernoulli_sample(theta)

    def data_gradient(self, theta, values, cost_of, norms=None):
        return [self._differences(values, layer, range(value.numel()), cost_of) for layer, value in enumerate(values)]

    @staticmethod
    @torch.no_grad()
    def _differences(values, layer, units, cost_of, out=None):
        base = float(cost_of(values))
        out = torch.zeros_like(values[layer]) if out is None else out
        for unit in units:
            switched = [value.detach().clone() for value in values]
            on = bool(switched[layer][unit] > 0.5)
            switched[layer][unit] = 0.0 if on else 1.0
            other = float(cost_of(switched))
            out[unit] = base - other if on else other - base
        return out


class Hybrid(Estimator):
    """Section 3.3.4: the Taylor estimate for every unit, replaced by the exact two-pass difference
    for the ``units`` units with the largest ‖w_b‖² + ‖w_f‖² (where the Taylor bias is largest)."""

    def __init__(self, units: int = 10):
        self.units = units
        self.taylor = Taylor()

    def values(self, theta):
        return self.taylor.values(theta)

    def data_gradient(self, theta, values, cost_of, norms=None):
        estimates = self.taylor.data_gradient(theta, values, cost_of)
        flat = torch.cat(norms)
        chosen = torch.topk(flat, min(self.units, flat.numel())).indices.tolist()
        offsets = [0, *itertools.accumulate(n.numel() for n in norms)]
        plain = [value.detach() for value in values]
        for layer, (start, stop) in enumerate(zip(offsets[:-1], offsets[1:])):
            units = [index - start for index in chosen if start <= index < stop]
            if units:
                Exact._differences(plain, layer, units, cost_of, out=estimates[layer])
        return estimates


ESTIMATORS = {"taylor": Taylor, "concrete": Concrete, "exact": Exact, "hybrid": Hybrid}
