"""The Linear/Conv2d chain of a plain network: what "unit i of layer l" is, defined once.

Gates, importance paths, unit-level pruning and export all read a network through
:func:`layer_chain`: its weighted layers in order, each with its site names, its number of units
(output features or channels) and how many input columns of the next weighted layer each of those
units owns (1, or H·W when a convolution is flattened into a linear layer, channel-major as
``nn.Flatten`` lays it out).
"""
from dataclasses import dataclass

import torch
from torch import nn

WEIGHTED = (nn.Linear, nn.Conv2d)
#: Modules a chain may hold between weighted layers: they act on each unit (channel) separately.
PASS_THROUGH = (
    nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Softplus, nn.Identity,
    nn.Dropout, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d, nn.Flatten,
)


@dataclass(frozen=True)
class Layer:
    """One weighted layer of a chain.

    Attributes:
        name: the module's path in the network (``"1"``, ``"features.0"``).
        module: the ``Linear`` or ``Conv2d``.
        inputs_per_unit: input columns of the *next* weighted layer fed by each of this layer's
            units (H·W for a convolution followed by ``Flatten`` and a ``Linear``, else 1);
            ``None`` for the last layer.
    """

    name: str
    module: nn.Module
    inputs_per_unit: int | None

    @property
    def units(self) -> int:
        """Output features of a ``Linear``, output channels of a ``Conv2d``."""
        return self.module.weight.shape[0]

    @property
    def weight_site(self) -> str:
        return f"{self.name}.weight" if self.name else "weight"

    @property
    def bias_site(self) -> str | None:
        if self.module.bias is None:
            return None
        return f"{self.name}.bias" if self.name else "bias"

    @property
    def gate_site(self) -> str:
        """The site of this layer's unit (filter) gate or mask: ``"<name>.gate"``."""
        return f"{self.name}.gate" if self.name else "gate"


def layer_chain(net: nn.Module, input_shape=None) -> list:
    """The weighted layers of ``net`` in order, as :class:`Layer` s.

    ``net`` must be a plain chain: its leaf modules, in registration order, are ``Linear``/``Conv2d``
    layers and modules of :data:`PASS_THROUGH` (containers such as ``nn.Sequential`` may nest them).
    ``input_shape`` (without the batch dimension) is needed only when a convolution is flattened
    into a linear layer, to count the spatial positions per channel.

    Raises:
        ValueError: a module that is not part of a plain chain (batch norm, grouped convolutions,
            anything unknown), naming its path and type; or widths that do not chain.
    """
    leaves = [(name, module) for name, module in net.named_modules() if not list(module.children())]
    for name, module in leaves:
        if not isinstance(module, WEIGHTED + PASS_THROUGH):
            raise ValueError(f"module {name!r} ({type(module).__name__}) is not supported: "
                             "only chains of Linear/Conv2d, pooling, activations, Dropout and Flatten")
        if isinstance(module, nn.Conv2d) and module.groups != 1:
            raise ValueError(f"module {name!r} (Conv2d with groups={module.groups}) is not supported: grouped convolution")
    weighted = [(name, module) for name, module in leaves if isinstance(module, WEIGHTED)]
    if not weighted:
        raise ValueError("the network has no Linear or Conv2d layer")
    layers = []
    for (name, module), following in zip(weighted, weighted[1:] + [None]):
        per_unit = None
        if following is not None:
            per_unit = _inputs_per_unit(net, module, following, input_shape, name)
        layers.append(Layer(name, module, per_unit))
    return layers


def _inputs_per_unit(net, module, following, input_shape, name) -> int:
    next_name, next_module = following
    units = module.weight.shape[0]
    fan_in = next_module.weight.shape[1]
    if isinstance(next_module, nn.Conv2d) or isinstance(module, nn.Linear):
        if fan_in != units:
            raise ValueError(f"module {next_name!r} takes {fan_in} inputs, which do not match the {units} units of {name!r}")
        return 1
    # Conv2d → (pooling) → Flatten → Linear: each channel owns H·W consecutive columns.
    if fan_in % units:
        raise ValueError(f"module {next_name!r} takes {fan_in} inputs, which do not match the {units} channels of {name!r}")
    if input_shape is not None:
        spatial = _output_positions(net, module, input_shape)
        if spatial * units != fan_in:
            raise ValueError(f"module {next_name!r} takes {fan_in} inputs, which do not match the {units}×{spatial} outputs of {name!r}")
    return fan_in // units


def _output_positions(net, module, input_shape) -> int:
    """H·W of the activation that reaches the layer after ``module`` (after its pooling)."""
    shapes = []
    hooks = [m.register_forward_hook(lambda m, i, o: shapes.append((m, o.shape))) for m in net.modules()
             if not list(m.children())]
    try:
        with torch.no_grad():
            net(torch.zeros(1, *input_shape, device=module.weight.device, dtype=module.weight.dtype))
    finally:
        for hook in hooks:
            hook.remove()
    after = False
    positions = None
    for m, shape in shapes:
        if m is module:
            after = True
        elif after and isinstance(m, WEIGHTED):
            break
        if after and len(shape) == 4:
            positions = shape[2] * shape[3]
    return positions
