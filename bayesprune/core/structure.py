"""What "unit i of layer l" is, defined once for any network, through Torch-Pruning's dependency graph
(:func:`unit_groups`); a plain chain of layers read by hand is :mod:`bayesprune.core.chain`.

Torch-Pruning's ``DependencyGraph`` traces the network and couples every tensor dimension that must
shrink together. A unit group is the set of output channels (features) that residual additions, batch
norms and shared consumers tie together: in a ResNet the channels of a stage's stem, its blocks' second
convolutions and its projection skip form one group. Unit i of a group is output channel i of each of its
producers (``Linear`` rows, ``Conv`` filters, their biases, batch-norm entries) and input channel i (a
flattened channel's H·W columns together) of each of its consumers; removing it removes all of these. A
group is named after its first ``Linear``/``Conv`` layer in module order (its root), and its gate or mask
site is ``"<root>.gate"``; the group feeding the network's output has no gate. For a plain chain the groups
are the hidden layers, one each.
"""

import copy
from dataclasses import dataclass

import torch
from torch import nn

from bayesprune.core.heads import (
    ATTENTION,
    HeadsRemovedAttention,
    embedding_pruner,
    head_count,
    heads_owner,
    heads_removable,
    set_heads,
)

#: Square input sizes tried, in order, when a convolutional network is given no input shape.
PROBE_SIZES = (28, 32, 224, 64, 16, 8, 96, 128, 256, *range(1, 65))
#: Modules that normalise across channels: removing a channel changes what the others compute, so
#: their channels are no units (zeroing one is not removing it).
NORMALISING = (nn.LayerNorm, nn.GroupNorm)


@dataclass(frozen=True)
class UnitGroup:
    """Units that are removed as one, each a set of coupled channels (a dependency group of Torch-Pruning).

    Unit ``i`` covers the root's output channels ``channel_indices()[i]``: ``block`` consecutive
    channels (a head's ``head_dim``; 1 for a channel), repeated in each of ``repeats`` equal slices of
    the channels (the groups of a grouped convolution, which must all keep the same width). So
    ``channels = units · block · repeats``. The same indices are the unit's output entries in every
    producer (rows of a ``Linear``/``Conv``, batch-norm entries; for an attention module, the rows of
    each of its query, key and value projections) and its input columns in every consumer
    (``Linear`` columns, ``Conv`` input channels, an attention's ``out_proj`` columns); a consumer
    behind a concatenation sees them shifted by the offset of the group's slice, and a flattened
    channel owns its H·W consecutive columns. Scaling those consumer columns by a unit's gate is
    removing the unit when the gate is 0. An attention's ``out_proj`` is read as a weight by its
    attention module, never called: scale its weight's columns, not its inputs through a hook.

    Attributes:
        name: the root's module path: the group's first ``Linear``/``Conv`` in module order, or the
            attention module (``nn.MultiheadAttention``) whose heads are the units.
        units: the number of units.
        producers: paths of the modules whose output channels are the units, in module order.
        consumers: paths of the modules that take the units as input channels, in module order.
        block: consecutive channels per unit (``head_dim`` for attention heads, else 1).
        repeats: slices of the channels each unit has a block in (a grouped convolution's groups, else 1).
        heads_of: the module whose head count (``num_heads``, ``num_attention_heads``) counts the units
            (heads), else ``None``.
    """

    name: str
    units: int
    producers: tuple
    consumers: tuple
    block: int = 1
    repeats: int = 1
    heads_of: str | None = None

    @property
    def gate_site(self) -> str:
        """The site of the group's unit (filter) gate or mask: ``"<root>.gate"``."""
        return f"{self.name}.gate" if self.name else "gate"

    @property
    def channels(self) -> int:
        """The root's output channels: ``units · block · repeats``."""
        return self.units * self.block * self.repeats

    def channel_indices(self) -> torch.Tensor:
        """``(units, repeats · block)``: the root's output channels that each unit covers."""
        within = torch.arange(self.units).view(-1, 1, 1) * self.block + torch.arange(self.block).view(1, 1, -1)
        return (within + torch.arange(self.repeats).view(1, -1, 1) * (self.units * self.block)).flatten(1)

    def weight_rows(self, net: nn.Module) -> list:
        """``[(weight site, rows)]``: for each ``Linear``/``Conv``/attention producer, the rows of its
        weight that each unit owns, ``rows`` of shape ``(units, k)`` (an attention's query, key and
        value rows of a head together)."""
        index = self.channel_indices()
        rows = []
        for name in self.producers:
            module = net.get_submodule(name)
            if isinstance(module, ATTENTION):
                width = module.in_proj_weight.shape[0] // 3
                rows.append((_site(name, "in_proj_weight"), torch.cat([index + k * width for k in range(3)], 1)))
            elif isinstance(module, (nn.Linear, nn.modules.conv._ConvNd)):
                copies = module.weight.shape[0] // self.channels  # 3 for a fused query/key/value layer
                rows.append((_site(name, "weight"), torch.cat([index + k * self.channels for k in range(copies)], 1)))
        return rows


def _site(module: str, parameter: str) -> str:
    return f"{module}.{parameter}" if module else parameter


def input_shape_of(net: nn.Module, input_shape=None) -> tuple:
    """One input's shape without the batch dimension: ``input_shape`` if given, ``(in_features,)``
    for a network whose first weighted layer is a ``Linear``, else the first square size of
    :data:`PROBE_SIZES` at which a convolutional network runs.

    Raises:
        ValueError: a network without a ``Linear``/``Conv`` layer, or one that runs at no probe size.
    """
    if input_shape is not None:
        return tuple(input_shape)
    first = next((m for m in net.modules() if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d))), None)
    if first is None:
        raise ValueError("the network has no Linear or Conv layer; give its input shape")
    if isinstance(first, nn.Linear):
        return (first.in_features,)
    parameter = next(net.parameters())
    spatial = first.weight.dim() - 2
    training = net.training
    net.eval()
    try:
        with torch.no_grad():
            for size in PROBE_SIZES:
                shape = (first.in_channels, *[size] * spatial)
                try:
                    net(torch.zeros(1, *shape, device=parameter.device, dtype=parameter.dtype))
                except (RuntimeError, ValueError, AssertionError):  # torchvision asserts its image size
                    continue
                return shape
    finally:
        net.train(training)
    raise ValueError("the network runs on no square input of the probe sizes; give its input shape")


def example_input(net: nn.Module, input_shape=None, *, batch: int = 2) -> torch.Tensor:
    """A fixed random batch of ``batch`` inputs of :func:`input_shape_of` on ``net``'s device and dtype."""
    shape = input_shape_of(net, input_shape)
    parameter = next(net.parameters())
    generator = torch.Generator(device=parameter.device).manual_seed(0)
    return torch.randn(batch, *shape, generator=generator, device=parameter.device, dtype=parameter.dtype)


class NotTraceable(ValueError):
    """Torch-Pruning cannot trace the network: its units are unknown, its weights can still be pruned."""


def dependency_graph(net: nn.Module, input_shape=None):
    """Torch-Pruning's ``DependencyGraph`` of ``net``, traced in eval mode on :func:`example_input`.

    Parameters of modules Torch-Pruning has no pruner for (ConvNeXt's layer scale, a ViT's class
    token and position embedding) are its unwrapped parameters, cut along their last dimension of
    more than one entry; grouped convolutions are its channel groups (:attr:`UnitGroup.repeats`).
    Whether a removal computes the masked network is checked afterwards
    (:func:`bayesprune.core.export.check_export`), not assumed.

    Raises:
        NotTraceable: a network that fails to run or to trace.
    """
    x = example_input(net, input_shape)
    training = net.training
    net.eval()
    try:
        graph = _traced(net, x)
        if isinstance(graph, Exception):
            message = " ".join(str(graph).split())[:200]
            where = _where_tracing_fails(net, x, graph)
            raise NotTraceable(
                f"{where} cannot be traced by Torch-Pruning on inputs of shape {tuple(x.shape[1:])}: {message}"
            )
    finally:
        net.train(training)
    return graph


def _traced(module, inputs):
    """Torch-Pruning's graph of ``module`` run on ``inputs``, or the exception its tracing raised."""
    import torch_pruning as tp

    try:
        with torch.enable_grad():
            return tp.DependencyGraph().build_dependency(
                module,
                example_inputs=inputs,
                customized_pruners={HeadsRemovedAttention: embedding_pruner()},
                verbose=False,
            )
    except Exception as error:  # a tracing failure of any kind is the user's network's
        return error


def _where_tracing_fails(net, x, error) -> str:
    """``"module 'path' (Type)"``: the innermost module that, traced alone on the inputs it is given
    in ``net``, fails as ``net`` does (same exception type and message); ``"the network"`` if none."""
    inputs = {}
    hooks = [
        module.register_forward_pre_hook(lambda module, args, name=name: inputs.setdefault(name, args))
        for name, module in net.named_modules()
    ]
    try:
        with torch.no_grad():
            net(x)
    except Exception:  # noqa: BLE001 - a network that does not run: nothing to narrow down
        return "the network"
    finally:
        for hook in hooks:
            hook.remove()
    same = (type(error), str(error))
    name, found = "", True
    while found:
        found = False
        for child, _ in net.get_submodule(name).named_children():
            path = f"{name}.{child}" if name else child
            failure = _traced(net.get_submodule(path), inputs[path]) if path in inputs else None
            if isinstance(failure, Exception) and (type(failure), str(failure)) == same:
                name, found = path, True
                break
    return f"module {name!r} ({type(net.get_submodule(name)).__name__})" if name else "the network"


def unit_groups(net: nn.Module, input_shape=None, *, graph=None) -> list:
    """The :class:`UnitGroup` s of ``net`` that can lose units, in the module order of their roots.

    Channel groups come from Torch-Pruning's dependency graph. Left out: a group that reaches the
    network's output (its units are outputs), one that a layer or group norm normalises across (a
    transformer's or ConvNeXt's residual stream: removing a channel changes the statistics of the
    others), and an attention's embedding. The heads of every attention module are a group of their
    own: an ``nn.MultiheadAttention`` (query/key/value rows and ``out_proj`` columns of a head), and
    a module with a head count (:func:`bayesprune.core.heads.head_count`) whose query, key and value
    ``Linear`` children, or one fused ``qkv`` child, form one channel group with its output projection
    (:func:`bayesprune.core.heads.heads_owner`).

    Args:
        net: the network.
        input_shape: one input's shape without the batch dimension (default: :func:`input_shape_of`).
        graph: a :func:`dependency_graph` of ``net`` already built.

    Raises:
        ValueError: a head count that does not divide the width of its query/key/value layers.
    """
    graph = graph if graph is not None else dependency_graph(net, input_shape)
    names = {module: name for name, module in net.named_modules()}
    order = {name: index for index, name in enumerate(names.values())}
    groups = []
    for group in graph.get_all_groups(root_module_types=(nn.modules.conv._ConvNd, nn.Linear)):
        producers, consumers, repeats, skip = set(), set(), 1, False
        for item in group:
            module, out = item.dep.target.module, graph.is_out_channel_pruning_fn(item.dep.handler)
            skip |= (out and not item.dep.target.outputs) or isinstance(module, NORMALISING + ATTENTION)
            if isinstance(module, nn.modules.conv._ConvNd) and module.groups not in (1, module.in_channels):
                repeats = max(repeats, module.groups)  # a grouped convolution: every group keeps the same width
            if module in names:
                (producers if out else consumers).add(names[module])
        if skip:
            continue
        weighted = sorted(
            (name for name in producers if isinstance(net.get_submodule(name), (nn.modules.conv._ConvNd, nn.Linear))),
            key=order.get,
        )
        channels = graph.get_out_channels(net.get_submodule(weighted[0]))
        owner, copies = _heads(net, graph, weighted, consumers)
        block = 1
        if owner is not None:
            channels //= copies  # a fused query/key/value layer: each channel is a row of each
            attribute, heads = head_count(net.get_submodule(owner))
            if channels % heads:
                raise ValueError(
                    f"module {owner!r} has {attribute}={heads}, which does not divide the {channels} "
                    f"output features of {weighted[0]!r}{' (a third of its rows)' if copies == 3 else ''}"
                )
            block = channels // heads
        groups.append(
            UnitGroup(
                weighted[0],
                channels // (block * repeats),
                tuple(sorted(producers, key=order.get)),
                tuple(sorted(consumers, key=order.get)),
                block=block,
                repeats=repeats,
                heads_of=owner,
            )
        )
    for name, module in net.named_modules():
        if isinstance(module, ATTENTION) and name and heads_removable(module):
            groups.append(
                UnitGroup(name, module.num_heads, (name,), (f"{name}.out_proj",), block=module.head_dim, heads_of=name)
            )
    return sorted(groups, key=lambda group: order[group.name])


def _heads(net, graph, weighted, consumers) -> tuple:
    """``(owner, copies)``: the attention module whose heads a group's channels are
    (:func:`bayesprune.core.heads.heads_owner`, else ``None``), and how many rows of the group's first
    producer each channel is (3 for a fused query/key/value layer, as the graph maps it)."""
    if head_count(net.get_submodule(weighted[0].rpartition(".")[0])) is None:
        return None, 1
    root = net.get_submodule(weighted[0])
    items = graph.get_pruning_group(root, graph.get_pruner_of_module(root).prune_out_channels, [0])
    copies = next(len(item.idxs) for item in items if item.dep.target.module is root)
    return heads_owner(net, weighted, consumers, copies), copies


def remove_units(net: nn.Module, unit_masks: dict, *, input_shape=None, graph=None) -> nn.Module:
    """Remove from ``net``, in place, the units whose entry in ``unit_masks`` (``"<root>.gate"`` →
    boolean mask, ``True`` = keep) is ``False``: every producer, consumer and coupled layer of each
    group shrinks together, through Torch-Pruning's dependency graph; a module's ``num_heads``
    follows its heads; an attention module that loses heads is replaced by a
    :class:`HeadsRemovedAttention` holding the others. Returns ``net``.

    Raises:
        ValueError: a mask for no group, of the wrong shape, or removing every unit of a group.
    """
    graph = graph if graph is not None else dependency_graph(net, input_shape)
    groups = {group.gate_site: group for group in unit_groups(net, graph=graph)}
    unknown = sorted(set(unit_masks) - set(groups))
    if unknown:
        raise ValueError(f"unit masks for no unit group of the network (the groups: {sorted(groups)}): {unknown}")
    for site, mask in unit_masks.items():
        group = groups[site]
        if tuple(mask.shape) != (group.units,):
            what = f"{group.units} heads of {group.block} channels" if group.heads_of else f"{group.units} units"
            raise ValueError(f"the mask {site!r} has shape {tuple(mask.shape)}, the layer {what}")
        if not mask.any():
            raise ValueError(
                f"the mask {site!r} removes every unit of layer {group.name!r}: a budget's min_keep "
                "(left unset, a tenth of each layer's units) keeps some"
            )
    attention = {}
    for site, mask in unit_masks.items():
        group, mask = groups[site], mask.to(torch.bool).cpu()
        if bool(mask.all()):
            continue
        root = net.get_submodule(group.name)
        if isinstance(root, ATTENTION):
            attention[group.name] = mask  # replaced after the graph's removals, which hold its modules
            continue
        removed = group.channel_indices()[~mask].flatten().tolist()
        graph.get_pruning_group(root, graph.get_pruner_of_module(root).prune_out_channels, removed).prune()
        if group.heads_of is not None:
            set_heads(net.get_submodule(group.heads_of), int(mask.sum()), group.block)
    for name, mask in attention.items():
        parent, _, child = name.rpartition(".")
        smaller = HeadsRemovedAttention.keeping(net.get_submodule(name), mask.nonzero().flatten())
        setattr(net.get_submodule(parent), child, smaller)
    return net


def kept_entries(net: nn.Module, unit_masks: dict, *, input_shape=None) -> dict:
    """Parameter name → (flat indices of the entries that removing the masked units keeps, the
    parameter's new shape), for every parameter that loses entries.

    Found by removing the units from a float64 copy of ``net`` whose parameters hold their own flat
    indices, so it agrees with :func:`remove_units` by construction.
    """
    if not any(not bool(mask.all()) for mask in unit_masks.values()):
        return {}
    return _index_probe(net, unit_masks, input_shape)[1]


def _index_probe(net: nn.Module, unit_masks: dict, input_shape) -> tuple:
    """``(probe, cuts)``: a float64 copy of ``net`` whose parameters held their own flat indices, with
    the masked units removed, and the cuts :func:`kept_entries` reads off it."""
    probe = copy.deepcopy(net).double()
    with torch.no_grad():
        for param in probe.parameters():
            param.copy_(torch.arange(param.numel(), dtype=torch.float64, device=param.device).view(param.shape))
    before = {name: param.numel() for name, param in probe.named_parameters()}
    remove_units(probe, unit_masks, input_shape=input_shape_of(net, input_shape))
    cuts = {
        name: (param.detach().flatten().round().long(), tuple(param.shape))
        for name, param in probe.named_parameters()
        if param.numel() != before[name]
    }
    return probe, cuts


def shrunk(net: nn.Module, unit_masks: dict, *, input_shape=None) -> tuple:
    """``(smaller, cuts)``: a copy of ``net`` without the masked units, and the cuts of
    :func:`kept_entries`, from one removal: the removal's index probe takes ``net``'s values at the
    kept indices and its dtypes back (exact: float32 buffers round-trip through float64 unchanged).
    """
    probe, cuts = _index_probe(net, unit_masks, input_shape)
    params, buffers = dict(net.named_parameters()), dict(net.named_buffers())
    names = {id(param): name for name, param in probe.named_parameters()}  # a tied parameter: one name
    replaced = {}
    for prefix, module in probe.named_modules():
        for key, param in module._parameters.items():
            if param is not None:
                if id(param) not in replaced:
                    name = names[id(param)]
                    source = params[name].detach()
                    if name in cuts:
                        kept, new_shape = cuts[name]
                        source = source.flatten()[kept.to(source.device)].view(new_shape)
                    replaced[id(param)] = nn.Parameter(source.clone(), requires_grad=params[name].requires_grad)
                module._parameters[key] = replaced[id(param)]
        for key, buffer in module._buffers.items():
            name = f"{prefix}.{key}" if prefix else key
            if buffer is not None and name in buffers:
                module._buffers[key] = buffer.to(buffers[name].dtype)
    return probe, cuts
