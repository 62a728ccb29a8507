"""The ``[optim]`` section and the optimisers it describes: Pyro's for SVI, ``torch.optim``'s for plain
optimiser steps."""

from dataclasses import dataclass

import pyro.optim
import torch

from bayesprune.core.validation import Rule, one_of, option, scale, unit, validate

SCHEDULES = ("constant", "exponential", "cosine")


@dataclass(frozen=True)
class OptimConfig:
    """``[optim]``: optimiser, learning rate and its per-epoch schedule.

    ``schedule = "exponential"`` multiplies the rate by ``gamma`` every epoch; ``"cosine"`` anneals it
    to zero over the run. ``momentum`` is SGD's (paper 000 trains with SGD and momentum 0.9);
    ``weight_decay`` adds ``weight_decay · θ`` to every gradient of the plain optimiser steps (the l2
    of 5e-4 of paper 001), not to SVI's objectives, whose priors regularise.
    """

    name: str = option("adam", one_of(("adam", "sgd")))
    lr: float = option(3e-3, scale())
    schedule: str = option("constant", one_of(SCHEDULES))
    gamma: float = option(0.99, unit(open_high=False))
    momentum: float = option(0.0, unit(open_low=False))
    weight_decay: float = option(0.0, scale(positive=False))

    rules = (
        Rule(
            "momentum",
            lambda o: o.momentum == 0 or o.name == "sgd",
            lambda o: "be 0 unless optim.name = 'sgd'",
            example={"name": "adam", "momentum": 0.9},
        ),
    )

    def __post_init__(self):
        validate(self, "optim")


def torch_optim_and_args(config) -> tuple:
    """The ``torch.optim`` class and arguments Pyro builds an optimiser of an :class:`OptimConfig` from.
    Pyro steps one optimiser per parameter: Adam's fused kernel makes each step one pass over it."""
    if config.name == "sgd":
        return torch.optim.SGD, {"lr": config.lr, **({"momentum": config.momentum} if config.momentum else {})}
    return torch.optim.Adam, {"lr": config.lr, "fused": True}


def build_optim(config, *, epochs: int):
    """A Pyro optimiser for an :class:`OptimConfig`, wrapped in a per-epoch
    learning-rate scheduler when one is configured (cosine annealing runs over ``epochs``)."""
    torch_optim, args = torch_optim_and_args(config)
    if config.schedule == "exponential":
        return pyro.optim.ExponentialLR({"optimizer": torch_optim, "optim_args": args, "gamma": config.gamma})
    if config.schedule == "cosine":
        return pyro.optim.CosineAnnealingLR({"optimizer": torch_optim, "optim_args": args, "T_max": epochs})
    return pyro.optim.PyroOptim(torch_optim, args)


def torch_optimizer(config, params, *, lr: float | None = None) -> torch.optim.Optimizer:
    """A ``torch.optim`` optimiser over ``params`` for an :class:`OptimConfig` (its
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
