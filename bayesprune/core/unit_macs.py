"""Expected multiply-accumulates of a network whose gated units are kept independently.

A unit of :class:`~bayesprune.core.gates.UnitGates` is kept with probability p (a gate open). Every
``Linear``/``Conv`` costs, per forward pass of one input, ``pair`` MACs for each (input channel,
output channel) pair it connects: k_h·k_w·H_out·W_out for a convolution, the number of tokens for a
``Linear``. With G convolution groups,

    MACs = pair · Σ_g (Σ_{i in group g} a_i) (Σ_{o in group g} b_o),

where a_i (b_o) is 1 for an input (output) channel that is no gated unit and its unit's indicator
otherwise. Under independent gates the expectation replaces each indicator by its p, and is exact
wherever a module's input and output channels are different units (every ``groups = 1`` layer whose
input and output groups differ; a depthwise convolution, whose input channel c is read only through
its output channel c, enters as Σ_c p_c). At p ∈ {0, 1} it is the MACs of the network with the closed
units removed, which :func:`bayesprune.core.export.count_macs` counts; operations without weights
(attention's matrix products, additions, pooling) are not counted.
"""

import torch
from torch import nn

from bayesprune.core.structure import example_input

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

    def __call__(self, probabilities: list) -> torch.Tensor:
        """E[MACs] (a 0-dim tensor, differentiable in ``probabilities``)."""
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
        return float(self([torch.ones(units) for units in self.gates.units]))
