"""The Linear/Conv2d chain of a plain network: what "unit i of layer l" is, defined once.

Gates, importance paths, unit-level pruning and export all read a network through
:func:`layer_chain`: its weighted layers in order, each with its site names, its number of units
(output features or channels) and how many input columns of the next weighted layer each of those
units owns (1, or H·W when a convolution is flattened into a linear layer, channel-major as
``nn.Flatten`` lays it out).

Unit i of a layer is row i of its weight (output feature i of a ``Linear``, filter i of a
``Conv2d``) with bias entry i, and, in its consumer (the next weighted layer), input column i (or
the block of columns ``i·k, ..., i·k + k − 1`` with k = :attr:`Layer.inputs_per_unit` after a
flattened convolution; input channel i of a ``Conv2d``). Removing unit i removes all of these.
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
        consumer: the name of the next weighted layer, which takes this layer's units as inputs;
            ``None`` for the last layer (its units are the network's outputs).
        inputs_per_unit: input columns of the *next* weighted layer fed by each of this layer's
            units (H·W for a convolution followed by ``Flatten`` and a ``Linear``, else 1);
            ``None`` for the last layer.
    """

    name: str
    module: nn.Module
    consumer: str | None
    inputs_per_unit: int | None

    @property
    def kind(self) -> str:
        """``"linear"`` or ``"conv2d"``."""
        return "linear" if isinstance(self.module, nn.Linear) else "conv2d"

    @property
    def units(self) -> int:
        """Output features of a ``Linear``, output channels of a ``Conv2d``."""
        return self.module.weight.shape[0]

    @property
    def weight_site(self) -> str:
        """The site (parameter name) of the weight: ``"<name>.weight"``."""
        return f"{self.name}.weight" if self.name else "weight"

    @property
    def bias_site(self) -> str | None:
        """The site of the bias, ``"<name>.bias"``, or ``None`` without a bias."""
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
    Where an input shape is known (``input_shape``, or ``(in_features,)`` when the first weighted
    layer is a ``Linear``), the network is also run on probe inputs (:func:`_check_forward`), which
    checks what the module list alone cannot show in a container with a forward of its own: its
    leaves are called once each in registration order, every path from one weighted layer to the
    output passes through the next, and each unit (channel) reaches only its own inputs of the
    next layer (channel-major after a flatten). Without a shape (a convolutional network given no
    ``input_shape``) a custom forward is taken on trust.

    Args:
        net: the network.
        input_shape: the shape of one input, without the batch dimension.

    Raises:
        ValueError: a module that is not part of a plain chain (batch norm, grouped convolutions,
            residual or skip connections, anything unknown), naming its path and type; or widths
            that do not chain.
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
            per_unit = _inputs_per_unit(module, following, name)
        layers.append(Layer(name, module, following and following[0], per_unit))
    if input_shape is None and isinstance(weighted[0][1], nn.Linear):
        input_shape = (weighted[0][1].in_features,)
    if input_shape is not None:
        _check_forward(net, leaves, layers, input_shape)
    return layers


def _check_forward(net, leaves, layers, input_shape):
    """Run ``net`` on probe inputs: is its forward the chain its registration order describes?"""
    parameter = next(net.parameters())
    generator = torch.Generator(device=parameter.device).manual_seed(0)
    x = torch.randn(2, *input_shape, generator=generator, device=parameter.device, dtype=parameter.dtype)
    modules = dict(net.named_modules())
    calls, outputs, inputs, replace = [], {}, {}, {}

    def record(name):
        def hook(module, args, output):
            calls.append(name)
            inputs[name], outputs[name] = args[0].clone(), output.clone()  # before any in-place activation
            return replace[name](output) if name in replace else None
        return hook

    def run(value, replacements):
        calls.clear()
        replace.clear()
        replace.update(replacements)
        return net(value)

    training = net.training
    hooks = [module.register_forward_hook(record(name)) for name, module in leaves]
    try:
        net.eval()
        with torch.no_grad():
            try:
                expected = run(x, {})
            except RuntimeError as error:
                raise ValueError(f"the network does not run on inputs of shape {tuple(input_shape)}: {error}") from None
            clean = dict(inputs)
            order = [name for name, _ in leaves]
            if calls != order:
                culprit = next((a for a, b in zip(calls, order) if a != b), None) or (calls[len(order):] or order[len(calls):])[0]
                raise ValueError(f"module {culprit!r} ({type(modules[culprit]).__name__}) is not called once in registration "
                                 f"order (calls: {calls}): only plain chains are supported")
            held = {layer.name: outputs[layer.name] for layer in layers}
            sources = [None] + layers[:-1]
            for source, target in zip(sources, layers):
                # With the target's output held, nothing upstream of it may reach the network's output.
                replacements = {target.name: lambda output, value=held[target.name]: value}
                if source is None:
                    changed = run(torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype), replacements)
                else:
                    replacements[source.name] = lambda output: torch.randn(output.shape, generator=generator,
                                                                           device=output.device, dtype=output.dtype)
                    changed = run(x, replacements)
                if not torch.allclose(changed, expected, rtol=1e-5, atol=1e-6):
                    _not_a_chain(net, target.name, f"the {'input' if source is None else f'output of {source.name!r}'} "
                                                   f"reaches the network's output other than through {target.name!r} "
                                                   "(a skip or residual connection?)")
            for source in layers[:-1]:
                # A unit may change only its own inputs of the consumer (no mixing across channels).
                baseline = clean[source.consumer]
                run(x, {source.name: lambda output: torch.cat([output[:, :1] + 1 + output[:, :1].abs(), output[:, 1:]], 1)})
                block = baseline[0].numel() // source.units  # channel-major: unit 0's inputs come first
                others = (inputs[source.consumer] != baseline).flatten(1)[:, block:]
                if others.any():
                    _not_a_chain(net, source.consumer, f"unit 0 of {source.name!r} changes inputs of {source.consumer!r} "
                                                       "that belong to other units")
    finally:
        for hook in hooks:
            hook.remove()
        net.train(training)


def _not_a_chain(net, name, why):
    """Raise, naming the innermost module with a forward of its own around module ``name``."""
    path = name.split(".")
    for depth in range(len(path) - 1, -1, -1):
        container = ".".join(path[:depth])
        module = net.get_submodule(container)
        if not isinstance(module, nn.Sequential):
            break
    where = f"module {container!r}" if container else "the network"
    raise ValueError(f"{where} ({type(module).__name__}) is not a plain chain: {why}")


def _inputs_per_unit(module, following, name) -> int:
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
    return fan_in // units
