"""A plain chain of weighted layers read by hand (:func:`layer_chain`): its layers in order, each with its
consumer and how many input columns of the consumer each of its units owns (1, or H·W when a convolution
is flattened into a linear layer, channel-major as ``nn.Flatten`` lays it out). The unit gates of paper
004 and the importance paths of paper 003 act on such chains; the units of any network are
:func:`bayesprune.core.structure.unit_groups`.
"""

from dataclasses import dataclass

import torch
from torch import nn

WEIGHTED = (nn.Linear, nn.Conv2d)
#: Modules a chain may hold between weighted layers: they act on each unit (channel) separately.
PASS_THROUGH = (
    nn.ReLU,
    nn.LeakyReLU,
    nn.ELU,
    nn.GELU,
    nn.SiLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.Softplus,
    nn.Identity,
    nn.Dropout,
    nn.MaxPool2d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool2d,
    nn.Flatten,
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
            raise ValueError(
                f"module {name!r} ({type(module).__name__}) is not supported: "
                "only chains of Linear/Conv2d, pooling, activations, Dropout and Flatten"
            )
        if isinstance(module, nn.Conv2d) and module.groups != 1:
            raise ValueError(
                f"module {name!r} (Conv2d with groups={module.groups}) is not supported: grouped convolution"
            )
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
    probe = _Probe(net, leaves)
    training = net.training
    try:
        net.eval()
        with torch.no_grad():
            x = probe.random((2, *input_shape))
            try:
                expected = probe.run(x)
            except RuntimeError as error:
                raise ValueError(f"the network does not run on inputs of shape {tuple(input_shape)}: {error}") from None
            clean = dict(probe.inputs)
            _check_order(probe, [name for name, _ in leaves])
            _check_paths(probe, layers, x, expected)
            _check_units(probe, layers, x, clean)
    finally:
        probe.remove()
        net.train(training)


class _Probe:
    """Forward hooks on every leaf of ``net``: the order of the calls, each leaf's input and output, and the
    outputs replaced where a run asks (``replacements``: leaf name → ``output → new output``)."""

    def __init__(self, net, leaves):
        parameter = next(net.parameters())
        self.net, self.device, self.dtype = net, parameter.device, parameter.dtype
        self.generator = torch.Generator(device=parameter.device).manual_seed(0)
        self.calls, self.outputs, self.inputs, self.replace = [], {}, {}, {}
        self.hooks = [module.register_forward_hook(self._record(name)) for name, module in leaves]

    def _record(self, name):
        def hook(module, args, output):
            self.calls.append(name)
            self.inputs[name], self.outputs[name] = args[0].clone(), output.clone()  # before an in-place activation
            return self.replace[name](output) if name in self.replace else None

        return hook

    def random(self, shape) -> torch.Tensor:
        return torch.randn(shape, generator=self.generator, device=self.device, dtype=self.dtype)

    def run(self, value, replacements=None):
        self.calls.clear()
        self.replace = dict(replacements or {})
        return self.net(value)

    def remove(self):
        for hook in self.hooks:
            hook.remove()


def _check_order(probe, order):
    """Every leaf called once, in registration order."""
    if probe.calls != order:
        calls = probe.calls
        culprit = (
            next((a for a, b in zip(calls, order) if a != b), None) or (calls[len(order) :] or order[len(calls) :])[0]
        )
        raise ValueError(
            f"module {culprit!r} ({type(probe.net.get_submodule(culprit)).__name__}) is not called once in "
            f"registration order (calls: {calls}): only plain chains are supported"
        )


def _check_paths(probe, layers, x, expected):
    """With a layer's output held, nothing upstream of it (the input, the layer before) reaches the output."""
    held = {layer.name: probe.outputs[layer.name] for layer in layers}
    for source, target in zip([None, *layers[:-1]], layers):
        replacements = {target.name: lambda output, value=held[target.name]: value}
        if source is None:
            changed = probe.run(probe.random(x.shape), replacements)
        else:
            replacements[source.name] = lambda output: probe.random(output.shape)
            changed = probe.run(x, replacements)
        if not torch.allclose(changed, expected, rtol=1e-5, atol=1e-6):
            _not_a_chain(
                probe.net,
                target.name,
                f"the {'input' if source is None else f'output of {source.name!r}'} "
                f"reaches the network's output other than through {target.name!r} "
                "(a skip or residual connection?)",
            )


def _check_units(probe, layers, x, clean):
    """A unit may change only its own inputs of the consumer (no mixing across channels)."""
    for source in layers[:-1]:
        baseline = clean[source.consumer]
        bumped = lambda output: torch.cat([output[:, :1] + 1 + output[:, :1].abs(), output[:, 1:]], 1)  # noqa: E731
        probe.run(x, {source.name: bumped})
        block = baseline[0].numel() // source.units  # channel-major: unit 0's inputs come first
        if (probe.inputs[source.consumer] != baseline).flatten(1)[:, block:].any():
            _not_a_chain(
                probe.net,
                source.consumer,
                f"unit 0 of {source.name!r} changes inputs of {source.consumer!r} that belong to other units",
            )


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
            raise ValueError(
                f"module {next_name!r} takes {fan_in} inputs, which do not match the {units} units of {name!r}"
            )
        return 1
    # Conv2d → (pooling) → Flatten → Linear: each channel owns H·W consecutive columns.
    if fan_in % units:
        raise ValueError(
            f"module {next_name!r} takes {fan_in} inputs, which do not match the {units} channels of {name!r}"
        )
    return fan_in // units
