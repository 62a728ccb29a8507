"""The Sparse VD model of a network and the optimiser that fits it."""

import pyro
import pyro.optim

from bayesprune.core.errors import ConfigError
from bayesprune.core.optim import build_optim, torch_optim_and_args
from bayesprune.methods.sparse_vd.model import (
    SparseVDNetwork,
    linear_decay,
)
from bayesprune.methods.sparse_vd.options import SparseVDOptions
from bayesprune.models import LIKELIHOODS


def build_model(net, data, *, noise_scale=None) -> SparseVDNetwork:
    """The Sparse VD network around ``net`` with the likelihood of the data's task."""
    options = {"scale": noise_scale} if data.task == "regression" else {}
    return SparseVDNetwork(net, LIKELIHOODS[data.task](data.num_train, **options))


def build_optimizer(options: SparseVDOptions, optim, *, epochs: int):
    """The Pyro optimiser: ``[optim]``'s optimiser, with the linear decay to 0 when asked."""
    if not options.linear_lr_decay:
        return build_optim(optim, epochs=epochs)
    if optim.schedule != "constant":
        raise ConfigError(
            f"sparse-vd.linear_lr_decay must be false when optim.schedule = {optim.schedule!r} "
            "(the two schedules exclude each other)"
        )
    torch_optim, args = torch_optim_and_args(optim)
    return pyro.optim.LambdaLR(
        {"optimizer": torch_optim, "optim_args": args, "lr_lambda": linear_decay(epochs, options.lr_decay_start)}
    )
