"""Optimisers of the ``[optim]`` section, shared by every method that trains with Pyro's SVI."""
import pyro.optim
import torch


def build_optim(config, *, epochs: int):
    """A Pyro optimiser for an :class:`~bayesprune.config.OptimConfig`, wrapped in a per-epoch
    learning-rate scheduler when one is configured (cosine annealing runs over ``epochs``)."""
    torch_optim = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[config.name]
    args = {"lr": config.lr}
    if config.schedule == "exponential":
        return pyro.optim.ExponentialLR({"optimizer": torch_optim, "optim_args": args, "gamma": config.gamma})
    if config.schedule == "cosine":
        return pyro.optim.CosineAnnealingLR({"optimizer": torch_optim, "optim_args": args, "T_max": epochs})
    return pyro.optim.PyroOptim(torch_optim, args)
