"""Deterministic architectures that :class:`BayesianNetwork` places priors on.

Every builder takes ``input_shape`` (without the batch dimension), ``output_dim`` and keyword
options, and returns a plain ``nn.Module``.
"""
import math

import torch
from torch import nn

from bayesprune.errors import ConfigError

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}


def mlp(input_shape, output_dim, *, hidden=(100,), activation="relu"):
    """Fully connected network ``input → hidden[0] → … → output`` with one activation between layers.

    Inputs of any shape are flattened first.
    """
    if activation not in ACTIVATIONS:
        raise ConfigError(f"model.activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    hidden = list(hidden)
    if any(not isinstance(width, int) or isinstance(width, bool) or width < 1 for width in hidden):
        raise ConfigError(f"model.hidden must be a list of positive integers, got {hidden!r}")
    widths = [math.prod(input_shape), *hidden]
    layers = [nn.Flatten()]
    for fan_in, fan_out in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(fan_in, fan_out), ACTIVATIONS[activation]()]
    layers.append(nn.Linear(widths[-1], output_dim))
    return nn.Sequential(*layers)


def lenet_300_100(input_shape, output_dim, *, activation="relu"):
    """LeNet-300-100 (LeCun et al., 1998): two hidden layers of 300 and 100 units (paper 003, section 4.4)."""
    return mlp(input_shape, output_dim, hidden=(300, 100), activation=activation)


def lenet_5(input_shape, output_dim):
    """LeNet-5 as used in the pruning literature (Caffe variant, paper 003 section 4.4).

    conv 5×5 (20) → max-pool 2 → conv 5×5 (50) → max-pool 2 → fc 500 → fc ``output_dim``, ReLU activations.
    """
    if len(input_shape) != 3 or min(input_shape[1:]) < 16:
        raise ConfigError(f"model.architecture 'lenet-5' needs image inputs of at least 16x16, got shape {tuple(input_shape)}")
    features = nn.Sequential(
        nn.Conv2d(input_shape[0], 20, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(20, 50, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
    )
    with torch.no_grad():
        flat = features(torch.zeros(1, *input_shape)).shape[-1]
    return nn.Sequential(*features, nn.Linear(flat, 500), nn.ReLU(), nn.Linear(500, output_dim))


ARCHITECTURES = {"mlp": mlp, "lenet-300-100": lenet_300_100, "lenet-5": lenet_5}


def build_architecture(name, input_shape, output_dim, **options):
    """Build the registered architecture ``name``; bad names or options raise :class:`ConfigError`."""
    if name not in ARCHITECTURES:
        raise ConfigError(f"model.architecture must be one of {sorted(ARCHITECTURES)}, got {name!r}")
    try:
        return ARCHITECTURES[name](tuple(input_shape), output_dim, **options)
    except TypeError as error:
        raise ConfigError(f"model: invalid option for architecture {name!r}: {error}") from None
