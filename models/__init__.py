"""Pyro model programs: Bayesian networks, likelihoods and the architectures they wrap."""

from bayesprune.models.architectures import (
    ARCHITECTURES,
    build_architecture,
    lenet_5_caffe,
    lenet_5_classic,
    lenet_300_100,
    mlp,
    new_net,
)
from bayesprune.models.bnn import BayesianNetwork
from bayesprune.models.likelihoods import LIKELIHOODS, BoundedCategorical, Categorical, Gaussian, Likelihood

__all__ = [
    "ARCHITECTURES",
    "BayesianNetwork",
    "BoundedCategorical",
    "Categorical",
    "Gaussian",
    "LIKELIHOODS",
    "Likelihood",
    "build_architecture",
    "lenet_300_100",
    "lenet_5_caffe",
    "lenet_5_classic",
    "mlp",
    "new_net",
]
