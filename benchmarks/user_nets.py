"""Two small MLPs a user would write and name in ``model.factory`` ("user_nets:one_layer_50",
"user_nets:two_layers_100"): networks no packaged setting was chosen on (issue 49)."""

import math

from torch import nn


def one_layer_50(input_shape, output_dim):
    """One hidden layer of 50 ReLU units."""
    return nn.Sequential(nn.Linear(math.prod(input_shape), 50), nn.ReLU(), nn.Linear(50, output_dim))


def two_layers_100(input_shape, output_dim):
    """Two hidden layers of 100 ReLU units."""
    return nn.Sequential(
        nn.Linear(math.prod(input_shape), 100),
        nn.ReLU(),
        nn.Linear(100, 100),
        nn.ReLU(),
        nn.Linear(100, output_dim),
    )
