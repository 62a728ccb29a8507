"""Normalisation statistics of a masked network, estimated again on training batches ("adaptive BN").

A batch norm's running mean and variance describe the activations of the network they were
accumulated in. Masking weights changes those activations, so the dense network's statistics
normalise the masked one wrongly: a pruned residual CNN can score near chance with them and
within a few points of the dense one with its own. :func:`recalibrate` replaces them by the
statistics of the masked network on a fixed number of training batches (one forward pass, no
gradient), the remedy of the pruning literature ("adaptive batch normalisation": Li et al. 2020,
"EagleEye: Fast Sub-net Evaluation for Efficient Neural Network Pruning").
"""

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.modules.batchnorm import _NormBase

#: Default number of training batches the statistics are estimated on: each point of a pruning curve
#: costs a forward pass over them. 4 of 128 rows gave a magnitude-pruned resnet18 (digits as 3x32x32)
#: the test error of the whole training set's statistics within about a point, the test error's own
#: sampling error, at 50-90% removed (docs/usage.md, "Batch norm after masking"; 20 was the default).
DEFAULT_BATCHES = 4
#: The fewest rows of a calibration batch: a run's ``data.batch_size`` below it would estimate the statistics
#: on fewer rows (4 batches of 32: 128 rows, up to 2.2 points of test error off every row's statistics in the
#: measurement above), and a batch norm's averaged statistics do not depend on the batch size.
MIN_BATCH_SIZE = 128
#: The most batches ``prune.recalibrate_batches`` takes: beyond it the estimate gains nothing and
#: every point of a pruning curve costs a pass over a large training set.
MAX_BATCHES = 1000


def norm_layers(net: nn.Module) -> list:
    """``(name, module)`` of every normalisation layer of ``net`` that keeps running statistics (batch
    norms, instance norms with ``track_running_stats=True``)."""
    return [
        (name, module)
        for name, module in net.named_modules()
        if isinstance(module, _NormBase) and module.track_running_stats and module.running_mean is not None
    ]


def has_running_stats(net: nn.Module) -> bool:
    """Whether ``net`` has a normalisation layer with running statistics."""
    return bool(norm_layers(net))


def calibration_batches(inputs: torch.Tensor, *, batches: int, batch_size: int, seed: int = 0) -> list:
    """The inputs :func:`recalibrate` reads: ``batches`` batches of ``batch_size`` rows of ``inputs``
    drawn without replacement in a fixed order (``seed``), fewer where ``inputs`` has fewer rows. A
    last batch of one row is dropped (a batch norm cannot take the variance of one value)."""
    order = torch.randperm(len(inputs), generator=torch.Generator().manual_seed(seed))[: batches * batch_size]
    chunks = [inputs[index] for index in torch.split(order, batch_size)]
    return chunks[:-1] if len(chunks) > 1 and len(chunks[-1]) < 2 else chunks


@torch.no_grad()
def recalibrate(
    net: nn.Module, inputs: torch.Tensor, *, batches: int = DEFAULT_BATCHES, batch_size: int = 128, seed: int = 0
) -> nn.Module:
    """Replace the running statistics of every normalisation layer of ``net`` by those of ``net`` as it
    is (masked weights zeroed) on :func:`calibration_batches` of ``inputs``; returns ``net``.

    Each layer's statistics are reset and accumulated as a plain average over the batches
    (``momentum = None``): the running mean is the mean of the batch means, the running variance the
    mean of the batches' unbiased variances. Only the normalisation layers run in training mode (no
    dropout); every module's mode and every layer's momentum are put back. A network without running
    statistics is returned untouched. Costs ``batches`` forward passes, without gradients.
    """
    layers = [module for _, module in norm_layers(net)]
    if not layers:
        return net
    modes = [(module, module.training) for module in net.modules()]
    momenta = [(layer, layer.momentum) for layer in layers]
    device = next(iter(layers[0].buffers())).device
    net.eval()
    try:
        for layer in layers:
            layer.reset_running_stats()
            layer.momentum = None
            layer.train()
        for batch in calibration_batches(inputs, batches=batches, batch_size=batch_size, seed=seed):
            net(batch.to(device))
    finally:
        for layer, momentum in momenta:
            layer.momentum = momentum
        for module, training in modes:
            module.training = training
    return net


def running_statistics(net: nn.Module) -> dict:
    """The buffers of ``net``'s normalisation layers (running mean, variance, batch count), by state-dict name."""
    return {
        f"{name}.{buffer}": value
        for name, module in norm_layers(net)
        for buffer, value in module.named_buffers(recurse=False)
    }


@contextmanager
def statistics_replaced(net: nn.Module, statistics: dict):
    """``net`` with the normalisation buffers ``statistics`` (from :func:`running_statistics`) copied in
    for the block; its own are put back afterwards."""
    own = {name: value.clone() for name, value in running_statistics(net).items()}
    buffers = dict(net.named_buffers())
    try:
        with torch.no_grad():
            for name, value in statistics.items():
                buffers[name].copy_(value)
        yield net
    finally:
        with torch.no_grad():
            for name, value in own.items():
                buffers[name].copy_(value)


def changes(net: nn.Module, masks) -> bool:
    """Whether ``masks`` (parameter name → bool tensor, ``True`` = keep) zero an entry of ``net`` that is
    not zero already: masks that remove nothing, or only weights a sparse method has zeroed, leave the
    network, and so its statistics, as they are."""
    params = dict(net.named_parameters())
    return any(
        bool((params[name].detach() != 0)[~mask.to(params[name].device, torch.bool)].any())
        for name, mask in (masks or {}).items()
        if name in params
    )


@dataclass(frozen=True)
class Calibration:
    """The training inputs (and how many batches of them) that a masked network's statistics are
    estimated on: what :class:`bayesprune.methods.Fitted` carries as ``calibration`` so that
    every masked prediction re-estimates them (:meth:`bayesprune.pipeline.config.PruneConfig.calibration`)."""

    inputs: torch.Tensor
    batches: int = DEFAULT_BATCHES
    batch_size: int = 128

    def apply(self, net: nn.Module) -> nn.Module:
        """:func:`recalibrate` ``net`` on these inputs; returns ``net``."""
        return recalibrate(net, self.inputs, batches=self.batches, batch_size=self.batch_size)
