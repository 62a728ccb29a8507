"""Export: masks applied to a network once, as zeros (weight level) or as smaller layers (unit level).

Units are removed through Torch-Pruning's dependency graph (:mod:`bayesprune.core.structure`), so
residual blocks, batch norms and coupled channels shrink together, and every removal is checked
against the masked network. Beside it, plain utilities for what a user checks after export:
parameter and MAC counts, measured latency, a file that runs without bayesprune or Pyro
(:func:`save_portable`; an ONNX file: :mod:`bayesprune.core.onnx_file`), a trainable file that rebuilds with
torch alone (:func:`save_trainable`, :func:`load_trainable`), masks that survive fine-tuning, and
:func:`resize` to rebuild a network that shrank while training from the shapes in its checkpoint.
"""

import copy
import inspect
import json
import statistics
import time

import torch
from torch import nn
from torch.nn.utils import parametrize

from bayesprune.core.errors import BayesPruneError
from bayesprune.core.heads import HeadsRemovedAttention, heads_removed_macs
from bayesprune.core.loop import check_stop
from bayesprune.core.preprocessing import Preprocessing, with_preprocessing
from bayesprune.core.pruning import apply_masks, expand_unit_masks
from bayesprune.core.quiet import printouts_dropped
from bayesprune.core.structure import (
    ATTENTION,
    NotTraceable,
    dependency_graph,
    example_input,
    input_shape_of,
    kept_entries,
    remove_units,
    unit_groups,
)

CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
#: Relative tolerance of the check of an export against the masked network (float32 sums in
#: another order differ by a few ulps).
CHECK_TOLERANCE = 1e-4


def export(net: nn.Module, masks: dict, *, input_shape=None) -> nn.Module:
    """A copy of ``net`` with ``masks`` applied.

    Weight-level masks (keyed by parameter name) zero the masked entries. Unit-level masks (keyed
    ``"<root>.gate"``, see :func:`bayesprune.core.pruning.prune`) remove the masked units through
    Torch-Pruning's dependency graph: every layer of the unit's group loses the unit's output
    channel (``Linear``/``Conv`` rows and biases, batch-norm entries), and every consumer its input
    channel (a flattened channel's H·W columns together). The result is checked on probe inputs, in
    eval mode, against ``net`` with the equivalent masks of
    :func:`bayesprune.core.pruning.expand_unit_masks` (and the weight masks) applied.

    Args:
        net: the network; it is not changed.
        masks: site name → boolean mask (``True`` = keep), as :func:`bayesprune.core.pruning.prune` gives.
        input_shape: one input's shape without the batch dimension, to trace the network (default:
            :func:`bayesprune.core.structure.input_shape_of`).

    Raises:
        ValueError: with unit masks, a module Torch-Pruning cannot handle or a removal that does not
            compute the masked network (naming the module); an unknown mask name, a mask of the
            wrong shape, or a mask that removes every unit of a layer.
    """
    original = net
    net = copy.deepcopy(net)
    params = dict(net.named_parameters())
    weight_masks = {name: mask for name, mask in masks.items() if not name.endswith("gate")}
    unit_masks = {name: mask for name, mask in masks.items() if name.endswith("gate")}
    unknown = sorted(set(weight_masks) - set(params))
    if unknown:
        raise ValueError(f"masks for parameters the network does not have: {unknown}")
    for name, mask in weight_masks.items():
        if mask.shape != params[name].shape:
            raise ValueError(
                f"the mask of {name!r} has shape {tuple(mask.shape)}, the parameter {tuple(params[name].shape)}"
            )
    with torch.no_grad():
        for name, mask in weight_masks.items():
            params[name].mul_(mask.to(params[name].device, params[name].dtype))
    if not unit_masks:
        return net
    shape = input_shape_of(original, input_shape)
    remove_units(net, {name: mask.to(torch.bool).cpu() for name, mask in unit_masks.items()}, input_shape=shape)
    check_export(original, net, weight_masks, unit_masks, shape)
    return net


def check_export(original, exported, weight_masks: dict, unit_masks: dict, shape):
    """Raise ``ValueError`` unless ``exported`` computes ``original`` with the weight masks and unit
    masks applied, on probe inputs of one input's ``shape`` in eval mode (naming the module whose
    units' removal does not)."""
    if _agrees(original, exported, weight_masks, unit_masks, shape):
        return
    removed = [name for name, mask in unit_masks.items() if not bool(mask.all())]
    culprit = next(
        (
            name
            for name in removed
            if not _agrees(
                original,
                remove_units(copy.deepcopy(original), {name: unit_masks[name]}, input_shape=shape),
                {},
                {name: unit_masks[name]},
                shape,
            )
        ),
        removed[0],
    )
    raise ValueError(
        f"module {culprit.removesuffix('.gate')!r}: removing its units does not compute the masked network: "
        "an operation mixes its channels where Torch-Pruning cannot see"
    )


def _agrees(original, exported, weight_masks, unit_masks, shape) -> bool:
    masks = dict(weight_masks)
    for name, mask in expand_unit_masks(original, unit_masks, input_shape=shape).items():
        masks[name] = masks[name].to(mask.device) & mask if name in masks else mask
    x = example_input(original, shape)
    modes = [module.training for module in original.modules()], [module.training for module in exported.modules()]
    original.eval()
    exported.eval()
    try:
        with torch.no_grad():
            expected = torch.func.functional_call(original, apply_masks(dict(original.named_parameters()), masks), (x,))
            try:
                got = exported(x)
            except RuntimeError:  # the removal broke a shape a module of the network relies on
                return False
    finally:
        for modules, flags in zip((original.modules(), exported.modules()), modes):
            for module, flag in zip(modules, flags):
                module.training = flag
    return (got - expected).abs().max().item() <= CHECK_TOLERANCE * max(1.0, expected.abs().max().item())


def dead_units(net: nn.Module, *, input_shape=None) -> dict:
    """Unit masks (``"<root>.gate"`` → ``True`` = keep) that remove the dead units of ``net``: a unit
    whose every entry in its group's producers is zero (``Linear``/``Conv`` rows and biases,
    batch-norm weight and bias: its output is zero), or whose every column in its consumers is zero
    (nothing reads it). Groups with no dead unit, groups all of whose units are dead (a layer is
    never emptied), and the heads of ``nn.MultiheadAttention`` modules are left out.

    Removing a unit of the first kind is exact for activations with f(0) = 0 (ReLU, tanh, GELU, …).
    A network Torch-Pruning cannot trace has none that can be removed: ``{}``.
    """
    try:
        graph = dependency_graph(net, input_shape)
    except NotTraceable:
        return {}
    names = {module: name for name, module in net.named_modules()}
    masks = {}
    for group in unit_groups(net, graph=graph):
        root = net.get_submodule(group.name)
        if isinstance(root, ATTENTION):
            continue  # a head's rows lie inside one module: not looked at
        unit_of = torch.empty(group.channels, dtype=torch.long)
        unit_of[group.channel_indices()] = torch.arange(group.units).view(-1, 1)
        items = graph.get_pruning_group(
            root, graph.get_pruner_of_module(root).prune_out_channels, list(range(group.channels))
        )
        if not _indices_in_range(items, graph):
            continue  # an operation Torch-Pruning maps wrongly (torch.fft between two layers): not looked at
        produced = torch.zeros(group.units, dtype=torch.long)
        read = torch.zeros(group.units, dtype=torch.long)
        for item in items:
            module = item.dep.target.module
            if module not in names:
                continue  # an operation without parameters
            roots = unit_of[torch.tensor(item.root_idxs, dtype=torch.long)]
            index = torch.tensor(item.idxs, dtype=torch.long)
            known = isinstance(module, (nn.Linear, *CONVOLUTIONS, nn.modules.batchnorm._BatchNorm))
            if graph.is_out_channel_pruning_fn(item.dep.handler):
                if not known:
                    produced += 1
                    continue
                for param in module.parameters(recurse=False):
                    entries = param.detach()[index.to(param.device)].ne(0).reshape(len(index), -1).any(1)
                    produced.index_add_(0, roots, entries.long().cpu())
            elif isinstance(module, nn.Linear) or (isinstance(module, CONVOLUTIONS) and module.groups == 1):
                columns = (
                    module.weight.detach()[:, index.to(module.weight.device)]
                    .ne(0)
                    .transpose(0, 1)
                    .reshape(len(index), -1)
                )
                read.index_add_(0, roots, columns.any(1).long().cpu())
            else:
                read += 1
        keep = (produced > 0) & (read > 0)
        if keep.any() and not keep.all():
            masks[group.gate_site] = keep
    return masks


def _indices_in_range(items, graph) -> bool:
    """Whether every index Torch-Pruning gives a group's modules lies within the dimension it cuts: an
    operation it does not model (``torch.fft.rfft`` between two ``Linear`` s: 8 outputs read as 5 inputs)
    maps channels to indices the next module does not have."""
    for item in items:
        module, out = item.dep.target.module, graph.is_out_channel_pruning_fn(item.dep.handler)
        if isinstance(module, nn.Linear):
            width = module.out_features if out else module.in_features
        elif isinstance(module, CONVOLUTIONS):
            width = module.out_channels if out else module.in_channels
        elif isinstance(module, nn.modules.batchnorm._BatchNorm):
            width = module.num_features
        else:
            continue
        if item.idxs and max(item.idxs) >= width:
            return False
    return True


def restrict(tensors: dict, net: nn.Module, unit_masks: dict, *, input_shape=None) -> dict:
    """Tensors shaped like ``net``'s parameters (by parameter name: gradients, optimiser moments)
    cut to the kept units as :func:`export` cuts the parameters; others are returned as they are."""
    cuts = kept_entries(
        net, {name: mask.to(torch.bool).cpu() for name, mask in unit_masks.items()}, input_shape=input_shape
    )
    return cut(tensors, cuts, {name: param.shape for name, param in net.named_parameters()})


def cut(tensors: dict, cuts: dict, shapes: dict) -> dict:
    """``tensors`` (by parameter name) cut as :func:`bayesprune.core.structure.shrunk`'s ``cuts`` say, where
    a tensor has its parameter's shape in ``shapes``; others are returned as they are."""
    result = {}
    for name, tensor in tensors.items():
        if name in cuts and tensor.shape == shapes[name]:
            kept, shape = cuts[name]
            tensor = tensor.flatten()[kept.to(tensor.device)].view(shape)
        result[name] = tensor
    return result


def resize(net: nn.Module, shapes: dict, *, input_shape=None) -> nn.Module:
    """``net`` with units removed, in place, until every parameter has the shape ``shapes`` gives it.

    ``shapes`` maps parameter names to shapes, as a checkpoint's ``structure`` records them, so the
    state of a network that lost units while training loads into a freshly built one. Each unit
    group whose root has fewer rows in ``shapes`` (output channels; an attention's query, key and
    value rows for its heads) loses its last units (which ones does not matter: the state is loaded
    next).

    Raises:
        ValueError: shapes that removing units cannot give.
    """
    graph = dependency_graph(net, input_shape)
    masks = {}
    for group in unit_groups(net, graph=graph):
        site, _ = group.weight_rows(net)[0]
        shape = shapes.get(site)
        rows = net.get_parameter(site).shape[0]
        if shape is not None and shape[0] < rows:
            masks[group.gate_site] = torch.arange(group.units) < group.units * shape[0] // rows
    if masks:
        remove_units(net, masks, graph=graph)
    wrong = [
        name for name, param in net.named_parameters() if name in shapes and list(param.shape) != list(shapes[name])
    ]
    if wrong:
        raise ValueError(f"removing units cannot give {wrong[0]!r} the shape {list(shapes[wrong[0]])}")
    return net


def count_parameters(net: nn.Module) -> dict:
    """``{"total", "nonzero"}``: the number of parameters and of non-zero ones."""
    params = list(net.parameters())
    return {"total": sum(p.numel() for p in params), "nonzero": sum(int(torch.count_nonzero(p)) for p in params)}


def count_macs(net: nn.Module, input_shape) -> int:
    """Multiply-accumulates of one forward pass of a single input, counted as Torch-Pruning counts them
    (:func:`torch_pruning.utils.count_ops_and_params`), so that a MAC budget, a report and a comparison's
    Torch-Pruning rows count alike. Its conventions: a ``Linear`` or convolution counts its products and
    its bias additions; a batch, layer or group norm one operation per element (two when affine); an
    activation (ReLU, GELU, ...) and a pooling one per element; ``nn.MultiheadAttention`` and timm's
    attention their projections, the scaling of the queries, the scores, softmax and weighted sums of every
    head; an operation outside such a module (a functional matrix product, an addition) nothing. A
    :class:`~bayesprune.core.heads.HeadsRemovedAttention` counts as the ``nn.MultiheadAttention`` of its
    heads (:func:`~bayesprune.core.heads.heads_removed_macs`). Zeroed weights are counted: dense hardware multiplies them all
    the same.

    ``nn.MultiheadAttention``'s fused fast path (which bypasses the module's call) is off while counting.
    """
    from torch_pruning.utils import op_counter

    parameter = next(net.parameters())
    fast_path = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    op_counter.CUSTOM_MODULES_MAPPING = {HeadsRemovedAttention: heads_removed_macs}  # reset by the call
    try:
        macs, _ = op_counter.count_ops_and_params(
            net, torch.zeros(1, *input_shape, device=parameter.device, dtype=parameter.dtype)
        )
    finally:
        op_counter.CUSTOM_MODULES_MAPPING = {}
        torch.backends.mha.set_fastpath_enabled(fast_path)
    return int(macs)


def measure_latency(
    net, input_shape, *, batch_sizes=(1, 64, 1024), warmup: int = 5, repeats: int = 30, device=None
) -> dict:
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
                check_stop("while timing the network")
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

    The input shape (``example_input``'s, without the batch dimension) is stored beside the program
    as the extra file ``bayesprune.json`` (``{"input_shape": [...]}``), read back by
    :func:`portable_input_shape`.

    ``torch.export`` rather than TorchScript: from torch 2.14 ``torch.jit.script``, ``trace`` and
    ``load`` warn that they are deprecated, while a file written here by torch 2.14 loads and runs
    in torch 2.13 as well (checked by hand in a virtual environment with only torch).
    """
    extra = {"bayesprune.json": json.dumps({"input_shape": list(example_input.shape[1:])})}
    torch.export.save(program(net, example_input), str(path), extra_files=extra)


def program(net: nn.Module, example_input: torch.Tensor):
    """``net`` (a copy in eval mode) as a :func:`torch.export.export` program of any batch size."""
    net = copy.deepcopy(net).eval().to(example_input.device)
    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    try:
        with printouts_dropped():
            return torch.export.export(net, (example_input,), dynamic_shapes=({0: batch},))
    except Exception as error:  # noqa: BLE001 - the user's forward, whatever torch.export makes of it
        first = next((line.strip() for line in str(error).splitlines() if line.strip()), "")[:200]
        raise BayesPruneError(
            f"model: torch.export cannot export the network's forward ({type(error).__name__}: {first}); a forward "
            "that branches on the data's values (if x.sum() > 0) needs torch.where or torch.cond"
        ) from None


def portable_input_shape(path) -> tuple:
    """The input shape stored in a file of :func:`save_portable`."""
    extra = {"bayesprune.json": ""}
    torch.export.load(str(path), extra_files=extra)
    return tuple(json.loads(extra["bayesprune.json"])["input_shape"])


#: The format tag of a file of :func:`save_trainable`.
TRAINABLE_FORMAT = "bayesprune.trainable/1"


def save_trainable(net: nn.Module, path, *, input_shape, preprocessing=None, built=None) -> bool:
    """Write ``net`` as a file that :func:`load_trainable` rebuilds into a trainable ``nn.Module``.

    The file is a dict that ``torch.load(path, weights_only=True)`` reads: ``format``
    (:data:`TRAINABLE_FORMAT`), ``input_shape``, ``architecture``, ``shapes``, ``state_dict`` and
    ``preprocessing`` (the data's, a :class:`~bayesprune.core.preprocessing.Preprocessing` given as its
    ``state()``, or ``None``). The
    architecture is a tree of ``torch.nn`` modules: ``{"type": "Sequential", "children": [[name,
    node], ...]}`` for a container, ``{"type": "Conv2d", "args": {"in_channels": 3, ...}}`` for a
    leaf, with the constructor arguments read back from the module's attributes. So any network
    built of ``nn.Sequential`` containers and ``torch.nn`` layers is described (every architecture
    of :mod:`bayesprune.models`, before or after export), and :func:`load_trainable` rebuilds it with
    torch alone.

    A network with a forward of its own (a custom class, a torchvision model: only its code knows how its
    children connect) is written with ``architecture = None`` and the shape of every parameter
    (``shapes``) when ``built`` is given: a network of the same code as ``net`` was before units were
    removed (the user's factory's). :func:`load_trainable` then takes a freshly built network of that code
    and removes its units until its parameters have those shapes (:func:`resize`) before loading the
    weights. Either way the rebuilt network is checked against ``net`` on a probe input before the
    file is written.

    Returns whether the file needs such a network to load (``architecture = None``).

    Raises:
        ValueError: a module with a forward of its own without ``built``, or whose arguments cannot be read
            back, naming it; a network that the file would not rebuild.
    """
    shapes = {name: list(param.shape) for name, param in net.named_parameters()}
    try:
        architecture = _describe(net, "")
        rebuilt = _build(architecture)
    except ValueError:
        if built is None:
            raise
        architecture, rebuilt = None, _resized(copy.deepcopy(built), shapes, input_shape)
    _check_rebuilds(rebuilt.to(next(net.parameters()).device), net, input_shape)
    state = {name: value.detach().cpu() for name, value in net.state_dict().items()}
    torch.save(
        {
            "format": TRAINABLE_FORMAT,
            "input_shape": list(input_shape),
            "architecture": architecture,
            "shapes": shapes,
            "state_dict": state,
            "preprocessing": None if preprocessing is None else preprocessing.state(),
        },
        path,
    )
    return architecture is None


def _resized(net: nn.Module, shapes: dict, input_shape) -> nn.Module:
    """``net`` with units removed to ``shapes`` (:func:`resize`), untouched where it has them already (a
    network Torch-Pruning cannot trace loses no unit)."""
    if all(list(param.shape) == list(shapes.get(name, param.shape)) for name, param in net.named_parameters()):
        return net
    try:
        return resize(net, shapes, input_shape=input_shape)
    except NotTraceable as error:
        raise ValueError(f"the network's units cannot be removed to the file's shapes: {error}") from None


def _check_rebuilds(rebuilt: nn.Module, net: nn.Module, input_shape):
    """Raise ``ValueError`` unless ``rebuilt`` with ``net``'s state computes what ``net`` computes."""
    try:
        rebuilt.load_state_dict(net.state_dict())
    except RuntimeError as error:
        raise ValueError(
            f"the network's description does not rebuild it: {' '.join(str(error).split())[:200]}"
        ) from None
    x = example_input(net, input_shape)
    training = net.training
    try:
        with torch.no_grad():
            same = torch.allclose(rebuilt.eval()(x), net.eval()(x), rtol=1e-6, atol=1e-6)
    finally:
        net.train(training)
    if not same:
        raise ValueError("the network's description does not rebuild it: the rebuilt network computes another function")


def load_trainable(path, *, net=None, map_location=None, raw_inputs: bool = False) -> nn.Module:
    """The ``nn.Module`` of a file of :func:`save_trainable`, rebuilt with torch alone and returned in
    eval mode; ``.train()`` makes it trainable like any module. The file's ``input_shape`` gives the
    shape of one input: ``torch.load(path, weights_only=True)["input_shape"]``. It computes on the
    data as the run's loader standardised them; ``raw_inputs=True`` wraps it in the file's
    preprocessing (:func:`bayesprune.core.preprocessing.with_preprocessing`: raw inputs, regression outputs
    in the target's units).

    A file of a network with a forward of its own (``architecture`` is ``None``) needs ``net``: a freshly
    built network of the same code (your factory's output, any weights); its units are removed to the
    file's shapes (:func:`resize`, Torch-Pruning) and the file's weights loaded into it. ``net`` is
    changed in place."""
    saved = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(saved, dict) or saved.get("format") != TRAINABLE_FORMAT:
        raise ValueError(f"{path}: not a file of bayesprune.core.export.save_trainable")
    if saved["architecture"] is not None:
        net = _build(saved["architecture"])
    elif net is None:
        raise ValueError(
            f"{path}: holds the weights of a network with a forward of its own: pass net=, a freshly built "
            "network of the same code (e.g. your model factory's)"
        )
    else:
        net = _resized(net, saved["shapes"], saved["input_shape"])
    net.load_state_dict(saved["state_dict"])
    if raw_inputs and saved.get("preprocessing") is not None:
        net = with_preprocessing(net, Preprocessing.from_state(saved["preprocessing"], saved["input_shape"]))
    return net.to(map_location).eval() if map_location is not None else net.eval()


def _describe(module, name):
    where = f"module {name!r}" if name else "the network"
    kind = type(module)
    if kind is nn.Sequential:
        return {
            "type": "Sequential",
            "children": [
                [child, _describe(sub, f"{name}.{child}" if name else child)] for child, sub in module.named_children()
            ],
        }
    if getattr(nn, kind.__name__, None) is not kind or list(module.children()):
        raise ValueError(
            f"{where} ({kind.__name__}) has a forward of its own: a trainable file describes networks of "
            "nn.Sequential and torch.nn layers only"
        )
    args = {}
    for parameter in list(inspect.signature(kind.__init__).parameters.values())[1:]:
        if parameter.name in ("device", "dtype") or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.name == "bias" and isinstance(getattr(module, "bias", None), (nn.Parameter, type(None))):
            value = module.bias is not None
        elif hasattr(module, parameter.name):
            value = getattr(module, parameter.name)
        elif parameter.default is not parameter.empty:
            continue
        else:
            raise ValueError(f"{where} ({kind.__name__}): its argument {parameter.name!r} cannot be read back")
        value = tuple(value) if isinstance(value, torch.Size) else value
        if not isinstance(value, (bool, int, float, str, tuple, list, type(None))):
            raise ValueError(f"{where} ({kind.__name__}): its argument {parameter.name!r} is a {type(value).__name__}")
        args[parameter.name] = value
    return {"type": kind.__name__, "args": args}


def _build(node):
    if node["type"] == "Sequential":
        net = nn.Sequential()
        for name, child in node["children"]:
            net.add_module(name, _build(child))
        return net
    kind = getattr(nn, node["type"], None)
    if not (isinstance(kind, type) and issubclass(kind, nn.Module)):
        raise ValueError(f"not a torch.nn module: {node['type']!r}")
    return kind(**node["args"])


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
    applied as their weight masks (:func:`bayesprune.core.pruning.expand_unit_masks`), and with a
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
