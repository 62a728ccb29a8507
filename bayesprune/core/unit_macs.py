"""Expected multiply-accumulates of a network whose gated units are kept independently.

A unit of :class:`~bayesprune.core.gates.UnitGates` is kept with probability p (a gate open). The MACs
:func:`bayesprune.core.export.count_macs` counts (Torch-Pruning's count) are, as a function of the kept
units, a bilinear part and an affine part. Every ``Linear``/``Conv`` multiplies ``pair`` times for each
(input channel, output channel) pair it connects (k_h·k_w·H_out·W_out for a convolution, the number of
tokens for a ``Linear``); with G convolution groups

    products = pair · Σ_g (Σ_{i in group g} a_i) (Σ_{o in group g} b_o),

where a_i (b_o) is 1 for an input (output) channel that is no gated unit and its unit's indicator
otherwise. Everything else counted (bias additions, normalisation, activations, pooling, attention's
per-head scores) is one or two operations per element of a tensor, so it is affine in the number of
kept units of each group: r0 + Σ_g r_g n_g, with r_g read off :func:`count_macs` of the network with
half of group g's units removed (:func:`bayesprune.core.structure.shrunk`). Under independent gates
the expectation replaces each indicator by its p; it is exact wherever a layer's input and output
channels are different units (every layer of ``groups = 1`` whose input and output groups differ; a
depthwise convolution, whose input channel c is read only through its output channel c, enters as
Σ_c p_c). At p ∈ {0, 1} it is :func:`count_macs` of the network with the closed units removed.
"""

import math

import torch
from torch import nn

from bayesprune.core.export import count_macs
from bayesprune.core.structure import example_input, shrunk

WEIGHTED = (nn.Linear, nn.modules.conv._ConvNd)


class ExpectedMacs:
    """E[MACs] of ``net``'s ``Linear``/``Conv`` layers as a differentiable function of the keep
    probabilities of ``gates``' units (one tensor per gated group, as :meth:`UnitGates.per_layer` lays
    them out).

    Args:
        net: the network the gates were built on.
        gates: its :class:`~bayesprune.core.gates.UnitGates`.
    """

    def __init__(self, net: nn.Module, gates):
        self.gates = gates
        self.layers = []
        shapes = {}
        names = {module: name for name, module in net.named_modules() if isinstance(module, WEIGHTED)}

        def record(module, args, output):
            shapes[names[module]] = output.shape

        handles = [module.register_forward_hook(record) for module in names]
        training = net.training
        net.eval()
        try:
            with torch.no_grad():
                net(example_input(net, gates.input_shape, batch=1))
        finally:
            net.train(training)
            for handle in handles:
                handle.remove()
        for name, module in net.named_modules():
            if name not in shapes:
                continue
            shape = shapes[name]
            if isinstance(module, nn.Linear):
                pair, groups = shape.numel() // module.out_features, 1
                inputs, outputs = module.in_features, module.out_features
            else:
                pair = module.weight[0, 0].numel() * shape[2:].numel()
                groups, inputs, outputs = module.groups, module.in_channels, module.out_channels
            self.layers.append((name, float(pair), groups, inputs, outputs))
        self.rows = {}  # module → [(group, output rows, their units)]
        for group, rows in enumerate(gates.producers):
            for name, (index, units) in rows.items():
                self.rows.setdefault(name, []).append((group, index, units))
        self.per_unit, self.constant = self._affine(net)

    def _affine(self, net) -> tuple:
        """``(r_g per group, r0)`` of the affine part: :func:`count_macs` less the products, at every unit
        kept and at half of one group's units removed."""
        full = [torch.ones(units, device=self.gates.raw.device) for units in self.gates.units]
        rest = count_macs(net, self.gates.input_shape) - float(self._products(full))
        per_unit = []
        for group, units in enumerate(self.gates.units):
            keep = [k.bool() for k in full]
            keep[group] = torch.arange(units, device=keep[group].device) < (units + 1) // 2
            masks = {site: k.cpu() for site, k in zip(self.gates.sites, keep)}
            smaller, _ = shrunk(net, masks, input_shape=self.gates.input_shape)
            removed = units - (units + 1) // 2
            smaller_rest = count_macs(smaller, self.gates.input_shape) - float(self._products(keep))
            per_unit.append(0.0 if removed == 0 else (rest - smaller_rest) / removed)
        return per_unit, rest - sum(r * units for r, units in zip(per_unit, self.gates.units))

    def __call__(self, probabilities: list) -> torch.Tensor:
        """E[MACs] (a 0-dim float64 tensor, differentiable in ``probabilities``)."""
        probabilities = [p.double() for p in probabilities]
        affine = sum(r * p.sum() for r, p in zip(self.per_unit, probabilities))
        return self._products(probabilities) + affine + self.constant

    def _products(self, probabilities: list):
        """E[products of the ``Linear``/``Conv`` layers]."""
        probabilities = [p.double() for p in probabilities]
        total = probabilities[0].new_zeros(())
        for name, pair, groups, inputs, outputs in self.layers:
            reader = self.gates.readers.get(name)
            fan_in = probabilities[0].new_ones(inputs) if reader is None else self.gates.scale(reader, probabilities)
            fan_out = probabilities[0].new_ones(outputs)
            for group, index, units in self.rows.get(name, ()):
                fan_out = fan_out.index_put((index,), probabilities[group][units])
            total = total + pair * (fan_in.view(groups, -1).sum(1) * fan_out.view(groups, -1).sum(1)).sum()
        return total

    def dense(self) -> float:
        """The MACs with every unit kept."""
        return float(self([torch.ones(units, device=self.gates.raw.device) for units in self.gates.units]))


def cut_to_macs(scores: list, macs, target: float, floors: list) -> list:
    """The keep masks (one per group) of the units of highest score whose MACs are at most ``target``:
    a global threshold on ``scores`` (one tensor per group), each group keeping at least its ``floor``
    units of highest score. ``macs`` is an :class:`~bayesprune.core.unit_macs.ExpectedMacs` (exact at
    0/1 keep values). Bisection over the sorted scores: keeping fewer units never costs more MACs."""
    flat = torch.cat([s.detach().flatten().double().cpu() for s in scores])
    order = flat.sort(descending=True).values
    floor_masks = []
    for s, floor in zip(scores, floors):
        top = torch.zeros(s.numel(), dtype=torch.bool)
        top[s.detach().cpu().topk(min(floor, s.numel())).indices] = True
        floor_masks.append(top)

    def masks_at(count: int) -> list:
        threshold = order[count - 1] if count > 0 else math.inf
        return [(s.detach().double().cpu() >= threshold) | top for s, top in zip(scores, floor_masks)]

    def cost(keep: list) -> float:
        device = scores[0].device
        return float(macs([k.to(device=device, dtype=torch.float32) for k in keep]))

    low, high = 0, len(order)  # masks_at(low) fits (the floors alone are assumed to), find the largest count that does
    if cost(masks_at(high)) <= target:
        return masks_at(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if cost(masks_at(middle)) <= target else (low, middle)
    return masks_at(low)
