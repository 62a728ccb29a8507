"""Deterministic architectures that :class:`BayesianNetwork` places priors on.

Every builder takes ``input_shape`` (without the batch dimension), ``output_dim`` and keyword
options, and returns a plain ``nn.Module``.
"""

import importlib
import math
import os
import sys

import pyro
import torch
from torch import nn

from bayesprune.core.checkpoint import load_weights
from bayesprune.core.errors import ConfigError, StopNow
from bayesprune.core.heads import declare_heads

ACTIVATIONS = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    # Paper 004, section 7: leaky ReLU with slope 1e-3, so that a unit switched off still passes a gradient.
    "leaky-relu": lambda: nn.LeakyReLU(1e-3),
}


def mlp(input_shape, output_dim, *, hidden=(100,), activation="relu"):
    """Fully connected network ``input → hidden[0] → … → output`` with one activation between layers.

    Inputs of any shape are flattened first.
    """
    _activation(activation)
    hidden = list(hidden)
    if any(not isinstance(width, int) or isinstance(width, bool) or width < 1 for width in hidden):
        raise ConfigError(f"model.hidden must be a list of positive integers, got {hidden!r}")
    widths = [math.prod(input_shape), *hidden]
    layers = [nn.Flatten()]
    for fan_in, fan_out in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(fan_in, fan_out), _activation(activation)]
    layers.append(nn.Linear(widths[-1], output_dim))
    return nn.Sequential(*layers)


def lenet_300_100(input_shape, output_dim, *, activation="relu"):
    """LeNet-300-100 (LeCun et al., 1998): two hidden layers of 300 and 100 units (paper 003, section 4.4)."""
    return mlp(input_shape, output_dim, hidden=(300, 100), activation=activation)


def _activation(name):
    if name not in ACTIVATIONS:
        raise ConfigError(f"model.activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]()


def _lenet(name, input_shape, output_dim, *, filters, kernel, hidden, activation):
    """conv (``filters[0]``) → max-pool 2 → conv (``filters[1]``) → max-pool 2 → fc ``hidden`` → fc
    ``output_dim``, square kernels without padding."""
    smallest = 3 * kernel + 1  # the smallest input that leaves one position after the second pool
    if len(input_shape) != 3 or min(input_shape[1:]) < smallest:
        raise ConfigError(
            f"model.architecture {name!r} needs image inputs of at least {smallest}x{smallest}, "
            f"got shape {tuple(input_shape)}"
        )
    features = nn.Sequential(
        nn.Conv2d(input_shape[0], filters[0], kernel),
        _activation(activation),
        nn.MaxPool2d(2),
        nn.Conv2d(filters[0], filters[1], kernel),
        _activation(activation),
        nn.MaxPool2d(2),
        nn.Flatten(),
    )
    with torch.no_grad():
        widths = [features(torch.zeros(1, *input_shape)).shape[-1], *hidden]
    layers = list(features)
    for fan_in, fan_out in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(fan_in, fan_out), _activation(activation)]
    return nn.Sequential(*layers, nn.Linear(widths[-1], output_dim))


def lenet_5_caffe(input_shape, output_dim, *, activation="relu"):
    """LeNet-5-Caffe, the LeNet-5 of the pruning literature (paper 003, section 4.4, Tables 7-8).

    conv 5×5 (20) → max-pool 2 → conv 5×5 (50) → max-pool 2 → fc 500 → fc ``output_dim``
    (430,500 weights and 580 biases on 28×28 MNIST).
    """
    return _lenet(
        "lenet-5-caffe", input_shape, output_dim, filters=(20, 50), kernel=5, hidden=(500,), activation=activation
    )


def lenet_5_classic(input_shape, output_dim, *, activation="relu"):
    """The classic LeNet-5 (LeCun et al., 1998) as paper 004, section 7 uses it.

    conv 5×5 (6) → max-pool 2 → conv 5×5 (16) → max-pool 2 → fc 120 → fc 84 → fc ``output_dim``,
    no padding: 44,190 weights on 28×28 MNIST, biases aside.
    """
    return _lenet(
        "lenet-5-classic", input_shape, output_dim, filters=(6, 16), kernel=5, hidden=(120, 84), activation=activation
    )


def torchvision_network(input_shape, output_dim, *, builder, **options):
    """A network of ``torchvision.models`` with random weights and ``output_dim`` classes: a builder
    (``builder = "resnet18"``, ``"mobilenet_v2"``) or a class (``"VisionTransformer"``, with ``image_size``,
    ``patch_size`` and its other arguments as options)."""
    import torchvision

    build = getattr(torchvision.models, builder, None) if isinstance(builder, str) else None
    if not callable(build):
        raise ConfigError(f"model.builder: torchvision.models has no builder or class {builder!r}")
    return build(num_classes=output_dim, **options)


ARCHITECTURES = {
    "mlp": mlp,
    "lenet-300-100": lenet_300_100,
    "lenet-5-caffe": lenet_5_caffe,
    "lenet-5-classic": lenet_5_classic,
    "lenet-5": lenet_5_caffe,  # the name of lenet-5-caffe before the classic LeNet-5 was added
    "torchvision": torchvision_network,
}


INITIALISATIONS = ("default", "xavier-normal")


def build_architecture(name, input_shape, output_dim, /, *, init="default", **options):
    """Build the registered architecture ``name``; bad names or options raise :class:`ConfigError`.

    ``init = "xavier-normal"`` redraws every weight from Glorot's normal initialiser and zeroes the
    biases (paper 004, section 7); ``"default"`` keeps PyTorch's. The first three are positional only, so
    that an option of the same name (``model.name``) reaches the builder and is refused in one line.
    """
    if name not in ARCHITECTURES:
        raise ConfigError(f"model.architecture must be one of {sorted(ARCHITECTURES)}, got {name!r}")
    try:
        net = ARCHITECTURES[name](tuple(input_shape), output_dim, **options)
    except TypeError as error:
        raise ConfigError(f"model: invalid option for architecture {name!r}: {error}") from None
    return _initialise(net, init)


def _initialise(net, init: str):
    if init not in INITIALISATIONS:
        raise ConfigError(f"model.init must be one of {list(INITIALISATIONS)}, got {init!r}")
    if init == "xavier-normal":
        for module in net.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                nn.init.xavier_normal_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
    return net


def network_factory(spec: str):
    """The callable of ``model.factory = "module:callable"``, its module imported with the working
    directory on the import path (a user's ``mynets.py`` beside the config)."""
    module_name, _, attribute = spec.partition(":")
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        target = importlib.import_module(module_name)
    except StopNow:
        raise
    except (Exception, KeyboardInterrupt, SystemExit) as error:  # any failure of the user's import, even sys.exit
        raise ConfigError(
            f"model.factory: cannot import module {module_name!r} from {os.getcwd()} "
            f"({type(error).__name__}: {_one_line(error)})"
        ) from None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    for name in attribute.split("."):
        target = getattr(target, name, None)
    if not callable(target):
        raise ConfigError(f"model.factory: module {module_name!r} has no callable {attribute!r}")
    return target


def build_from_factory(spec: str, input_shape, output_dim: int, /, *, init: str = "default", **options) -> nn.Module:
    """The user's network: ``callable(input_shape, output_dim, **options)`` of ``model.factory``."""
    factory = network_factory(spec)
    try:
        net = factory(tuple(input_shape), output_dim, **options)
    except StopNow:
        raise
    except (Exception, KeyboardInterrupt, SystemExit) as error:  # the user's code, even sys.exit(0)
        raise ConfigError(
            f"model.factory: {spec}{tuple(input_shape), output_dim} raised {type(error).__name__}: {_one_line(error)}"
        ) from None
    if not isinstance(net, nn.Module):
        raise ConfigError(f"model.factory: {spec} returned a {type(net).__name__}, not a torch.nn.Module")
    return main_logits(_initialise(net, init))


def main_logits(net: nn.Module) -> nn.Module:
    """``net``, made to return its main logits alone where it has auxiliary classifiers: torchvision's
    GoogLeNet and Inception v3 (``aux_logits=True``, their default) return them beside the main ones in
    training mode (``GoogLeNetOutputs``, ``InceptionOutputs``), which no loss here reads. Their
    parameters stay in the network, unused."""
    if getattr(net, "aux_logits", False) and _first_field_only not in net._forward_hooks.values():
        net.register_forward_hook(_first_field_only)
    return net


def _first_field_only(module, args, output):
    return output[0] if getattr(output, "_fields", ())[:1] == ("logits",) else None


def _one_line(error) -> str:
    return " ".join(str(error).split())[:200]


def new_net(config, input_shape, output_dim: int, *, seed: int, weights: bool = True):
    """The network of the config's architecture or factory, initialised with ``seed``, then holding the
    weights of ``model.weights`` where it names a file (``weights=False``: the initialisation alone, for a
    network whose state comes from elsewhere, a checkpoint, or that is built on the meta device)."""
    pyro.set_rng_seed(seed)
    if config.model.factory is not None:
        net = build_from_factory(config.model.factory, tuple(input_shape), output_dim, **config.model.options)
    else:
        net = build_architecture(config.model.architecture, tuple(input_shape), output_dim, **config.model.options)
    if config.model.heads:
        try:
            declare_heads(net, config.model.heads)
        except ValueError as error:
            raise ConfigError(f"model.heads: {error}") from None
    if weights and config.model.weights is not None:
        load_weights(net, config.model.weights)
    return net
