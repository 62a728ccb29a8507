"""Optimisers of the ``[optim]`` section, shared by every method that trains with Pyro's SVI."""
import pyro.optim
import torch


def build_optim(config, *, epochs: int):
    """A Pyro optimiser for an :class:`~bayesprune.config.OptimConfig`, wrapped in a per-epoch
    learning-rate scheduler when one is configured (cosine annealing runs over ``epochs``)."""
    torch_optim = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[config.name]
    args = {"lr": config.lr, **({"momentum": config.momentum} if config.momentum else {})}
    if config.schedule == "exponential":
        return pyro.optim.ExponentialLR({"optimizer": torch_optim, "optim_args": args, "gamma": config.gamma})
    if config.schedule == "cosine":
        return pyro.optim.CosineAnnealingLR({"optimizer": torch_optim, "optim_args": args, "T_max": epochs})
    return pyro.optim.PyroOptim(torch_optim, args)


def torch_optimizer(config, params, *, lr: float | None = None) -> torch.optim.Optimizer:
    """A ``torch.optim`` optimiser over ``params`` for an :class:`~bayesprune.config.OptimConfig` (its
    rate, or ``lr``; its momentum and weight decay), for methods whose steps are plain optimiser steps."""
    if config.name == "sgd":
        return torch.optim.SGD(params, lr=lr or config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    return torch.optim.Adam(params, lr=lr or config.lr, weight_decay=config.weight_decay)


def torch_scheduler(config, optimizer, *, epochs: int):
    """The per-epoch learning-rate schedule of ``config`` over a ``torch.optim`` optimiser (``None`` when constant)."""
    if config.schedule == "exponential":
        return torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=config.gamma)
    if config.schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(epochs, 1))
    return None
