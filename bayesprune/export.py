"""Export: masks applied to a network once, as zeros (weight level) or as smaller layers (unit level).

Beside it, plain utilities for what a user checks after export: parameter and MAC counts, measured
latency, a file that runs without bayesprune or Pyro, masks that survive fine-tuning, and
:func:`resize` to rebuild a network that shrank while training from the shapes in its checkpoint.
"""
import copy
import statistics
import time

import torch
from torch import nn
from torch.nn.utils import parametrize

from .pruning import expand_unit_masks
from .structure import layer_chain


def export(net: nn.Module, masks: dict, *, input_shape=None) -> nn.Module:
    """A copy of ``net`` with ``masks`` applied.

    Weight-level masks (keyed by parameter name) zero the masked entries. Unit-level masks (keyed
    ``"<layer>.gate"``, see :func:`bayesprune.pruning.prune`) remove the masked units: each such
    ``Linear``/``Conv2d`` is rebuilt with fewer outputs, and the next weighted layer with fewer
    inputs (a flattened channel's H·W columns together). The result computes the same function as
    ``net`` with the equivalent masks of :func:`bayesprune.pruning.expand_unit_masks`.

    Args:
        net: the network; it is not changed.
        masks: site name → boolean mask (``True`` = keep), as :func:`bayesprune.pruning.prune` gives.
        input_shape: one input's shape without the batch dimension; with unit masks, lets
            :func:`bayesprune.structure.layer_chain` check a convolutional network's forward by a
            probe (default ``None``: a Linear-first network is probed all the same).

    Raises:
        ValueError: a unit mask on a network that is not a plain chain (naming the module), an
            unknown mask name, a mask of the wrong shape, or a mask that removes every unit of a layer.
    """
    net = copy.deepcopy(net)
    params = dict(net.named_parameters())
    weight_masks = {name: mask for name, mask in masks.items() if not name.endswith("gate")}
    unit_masks = {name: mask for name, mask in masks.items() if name.endswith("gate")}
    unknown = sorted(set(weight_masks) - set(params))
    if unknown:
        raise ValueError(f"masks for parameters the network does not have: {unknown}")
    for name, mask in weight_masks.items():
        if mask.shape != params[name].shape:
            raise ValueError(f"the mask of {name!r} has shape {tuple(mask.shape)}, the parameter {tuple(params[name].shape)}")
    with torch.no_grad():
        for name, mask in weight_masks.items():
            params[name].mul_(mask.to(params[name].device, params[name].dtype))
    if not unit_masks:
        return net
    layers = layer_chain(net, input_shape)
    gates = {layer.gate_site: layer.units for layer in layers[:-1]}
    unknown = sorted(set(unit_masks) - set(gates))
    if unknown:
        raise ValueError(f"unit masks for layers that are not hidden layers of the chain: {unknown}")
    for name, mask in unit_masks.items():
        if mask.shape != (gates[name],):
            raise ValueError(f"the mask {name!r} has shape {tuple(mask.shape)}, the layer {gates[name]} units")
    for layer, (out_index, in_index) in _kept_indices(layers, unit_masks).items():
        _set_module(net, layer.name, _sliced(layer.module, out_index, in_index))
    return net


def _kept_indices(layers, unit_masks) -> dict:
    """Layer → (indices of its kept output units, of its kept input columns) for every layer that
    ``unit_masks`` changes."""
    kept, inputs = {}, None
    for layer in layers:
        outputs = unit_masks.get(layer.gate_site)
        if outputs is not None:
            outputs = outputs.to(torch.bool).cpu()
            if not outputs.any():
                raise ValueError(f"the mask {layer.gate_site!r} removes every unit of layer {layer.name!r}")
        if outputs is not None or inputs is not None:
            weight = layer.module.weight
            out_index = torch.arange(weight.shape[0]) if outputs is None else outputs.nonzero().flatten()
            in_index = torch.arange(weight.shape[1]) if inputs is None else inputs.nonzero().flatten()
            kept[layer] = (out_index.to(weight.device), in_index.to(weight.device))
        inputs = None if outputs is None else outputs.repeat_interleave(layer.inputs_per_unit)
    return kept


def restrict(tensors: dict, net: nn.Module, unit_masks: dict) -> dict:
    """Tensors shaped like ``net``'s parameters (by parameter name: gradients, optimiser moments)
    cut to the kept units as :func:`export` cuts the parameters; others are returned as they are."""
    cuts = {}
    for layer, (out_index, in_index) in _kept_indices(layer_chain(net), unit_masks).items():
        cuts[layer.weight_site] = lambda t, o=out_index, i=in_index: t[o.to(t.device)][:, i.to(t.device)]
        if layer.bias_site is not None:
            cuts[layer.bias_site] = lambda t, o=out_index: t[o.to(t.device)]
    return {name: cuts[name](tensor) if name in cuts else tensor for name, tensor in tensors.items()}


def _sliced(module, out_index, in_index):
    """``module`` restricted to the output units ``out_index`` and the input columns ``in_index``."""
    weight = module.weight.detach()
    new = _like(module, (len(out_index), len(in_index), *weight.shape[2:]))
    with torch.no_grad():
        new.weight.copy_(weight[out_index][:, in_index])
        if module.bias is not None:
            new.bias.copy_(module.bias.detach()[out_index])
    return new


def _like(module, shape):
    """A new layer of ``module``'s kind and settings with a weight of ``shape``, on its device and dtype."""
    options = {"bias": module.bias is not None, "device": module.weight.device, "dtype": module.weight.dtype}
    if isinstance(module, nn.Linear):
        return nn.Linear(shape[1], shape[0], **options)
    return nn.Conv2d(shape[1], shape[0], module.kernel_size, stride=module.stride, padding=module.padding,
                     dilation=module.dilation, padding_mode=module.padding_mode, **options)


def _set_module(net, name, module):
    parent, _, child = name.rpartition(".")
    setattr(net.get_submodule(parent) if parent else net, child, module)


def resize(net: nn.Module, shapes: dict) -> nn.Module:
    """``net`` with every ``Linear``/``Conv2d`` rebuilt to the weight shape ``shapes`` gives it.

    ``shapes`` maps parameter names to shapes, as a checkpoint's ``structure`` records them, so the
    state of a network that lost units while training loads into a freshly built one.
    """
    for layer in layer_chain(net):
        shape = shapes.get(layer.weight_site)
        if shape is not None and tuple(shape) != tuple(layer.module.weight.shape):
            _set_module(net, layer.name, _like(layer.module, tuple(shape)))
    return net


def count_parameters(net: nn.Module) -> dict:
    """``{"total", "nonzero"}``: the number of parameters and of non-zero ones."""
    params = list(net.parameters())
    return {"total": sum(p.numel() for p in params), "nonzero": sum(int(torch.count_nonzero(p)) for p in params)}


def count_macs(net: nn.Module, input_shape) -> int:
    """Multiply-accumulates of one forward pass of a single input in ``Linear`` and ``Conv2d`` layers.

    A Linear layer costs in·out per input row, a Conv2d out_channels·(in_channels/groups)·kh·kw per
    output position. Zeroed weights are counted: dense hardware multiplies them all the same.
    """
    macs = []

    def count(module, inputs, output):
        weight = module.weight
        positions = output.numel() // output.shape[0] // weight.shape[0]
        macs.append(positions * weight.numel())

    hooks = [m.register_forward_hook(count) for m in net.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    try:
        with torch.no_grad():
            parameter = next(net.parameters())
            net(torch.zeros(1, *input_shape, device=parameter.device, dtype=parameter.dtype))
    finally:
        for hook in hooks:
            hook.remove()
    return sum(macs)


def measure_latency(net, input_shape, *, batch_sizes=(1, 64, 1024), warmup: int = 5, repeats: int = 30, device=None) -> dict:
    """Median wall-clock seconds of one forward pass at each batch size, after ``warmup`` passes.

    Inputs are random, of the parameters' dtype; gradients off; the network in eval mode (restored
    afterwards). On CUDA every pass is bracketed by ``torch.cuda.synchronize``.

    Args:
        net: the network; measured on a copy when it lies on another device than ``device``.
        input_shape: one input's shape, without the batch dimension.
        batch_sizes: the batch sizes to time (default 1, 64 and 1024).
        warmup: untimed passes first (default 5).
        repeats: timed passes, of which the median is taken (default 30).
        device: where to run (default: where ``net``'s parameters are).

    Returns:
        Batch size → median seconds of one forward pass.
    """
    parameter = next(net.parameters())
    device = torch.device(device) if device is not None else parameter.device
    if parameter.device != device:
        net = copy.deepcopy(net).to(device)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    training = net.training
    result = {}
    with torch.no_grad():
        net.eval()
        for batch in batch_sizes:
            x = torch.randn(batch, *input_shape, device=device, dtype=parameter.dtype)
            for _ in range(warmup):
                net(x)
            times = []
            for _ in range(repeats):
                synchronize()
                start = time.perf_counter()
                net(x)
                synchronize()
                times.append(time.perf_counter() - start)
            result[batch] = statistics.median(times)
    net.train(training)
    return result


def save_portable(net: nn.Module, path, example_input: torch.Tensor):
    """Write ``net`` with :func:`torch.export.save`; ``torch.export.load(path).module()`` runs it with
    only torch installed (no bayesprune, no Pyro, no pickled code) at any batch size.

    ``torch.export`` rather than TorchScript: from torch 2.14 ``torch.jit.script``, ``trace`` and
    ``load`` warn that they are deprecated, while a file written here by torch 2.14 loads and runs
    in torch 2.13 as well (checked by hand in a virtual environment with only torch).
    """
    net = copy.deepcopy(net).eval().to(example_input.device)
    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    program = torch.export.export(net, (example_input,), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(path))


class _Mask(nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.register_buffer("mask", mask)

    def forward(self, weight):
        return weight * self.mask


def mask_parameters(net: nn.Module, masks: dict) -> nn.Module:
    """Make ``masks`` part of ``net`` so they survive fine-tuning: each masked parameter becomes
    ``original · mask`` (a ``torch.nn.utils.parametrize`` parametrization), so no optimiser step,
    weight decay included, can move a pruned weight off zero. Unit masks (``"<layer>.gate"``) are
    applied as their weight masks (:func:`bayesprune.pruning.expand_unit_masks`), and with a
    weight mask of the same parameter, both apply.
    :func:`unmask_parameters` bakes the masked values in. Changes ``net`` in place and returns it."""
    unit_masks = {name: mask for name, mask in masks.items() if name.endswith("gate")}
    masks = {name: mask for name, mask in masks.items() if name not in unit_masks}
    for name, mask in expand_unit_masks(net, unit_masks).items() if unit_masks else ():
        masks[name] = masks[name].to(mask.device) & mask if name in masks else mask
    for name, mask in masks.items():
        module_name, _, param = name.rpartition(".")
        module = net.get_submodule(module_name) if module_name else net
        value = getattr(module, param)
        parametrize.register_parametrization(module, param, _Mask(mask.to(value.device, value.dtype)))
    return net


def unmask_parameters(net: nn.Module) -> nn.Module:
    """Remove the parametrizations of :func:`mask_parameters`, keeping the masked values."""
    for module in net.modules():
        if parametrize.is_parametrized(module):
            for param in list(module.parametrizations):
                parametrize.remove_parametrizations(module, param, leave_parametrized=True)
    return net
