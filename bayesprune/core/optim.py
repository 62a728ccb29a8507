"""The ``[optim]`` section and the optimisers it describes: Pyro's for SVI, ``torch.optim``'s for plain
optimiser steps."""

from dataclasses import dataclass

import pyro.optim
import torch

from bayesprune.core.validation import MAX_SCALE, is_number, is_scale, require

SCHEDULES = ("constant", "exponential", "cosine")


@dataclass(frozen=True)
class OptimConfig:
    """``[optim]``: optimiser, learning rate and its per-epoch schedule.

    ``schedule = "exponential"`` multiplies the rate by ``gamma`` every epoch; ``"cosine"`` anneals it
    to zero over the run. ``momentum`` is SGD's (paper 000 trains with SGD and momentum 0.9);
    ``weight_decay`` adds ``weight_decay · θ`` to every gradient of the plain optimiser steps (the l2
    of 5e-4 of paper 001), not to SVI's objectives, whose priors regularise.
    """

    name: str = "adam"
    lr: float = 3e-3
    schedule: str = "constant"
    gamma: float = 0.99
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self):
        require(self.name in ("adam", "sgd"), "optim.name", "be 'adam' or 'sgd'", self.name)
        require(is_scale(self.lr), "optim.lr", f"be a positive number up to {MAX_SCALE:g}", self.lr)
        require(self.schedule in SCHEDULES, "optim.schedule", f"be one of {list(SCHEDULES)}", self.schedule)
        require(is_number(self.gamma) and 0 < self.gamma <= 1, "optim.gamma", "lie in (0, 1]", self.gamma)
        require(is_number(self.momentum) and 0 <= self.momentum < 1, "optim.momentum", "lie in [0, 1)", self.momentum)
        require(
            self.momentum == 0 or self.name == "sgd", "optim.momentum", "be 0 unless optim.name = 'sgd'", self.momentum
        )
        require(
            is_scale(self.weight_decay, positive=False),
            "optim.weight_decay",
            f"be a non-negative number up to {MAX_SCALE:g}",
            self.weight_decay,
        )


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
