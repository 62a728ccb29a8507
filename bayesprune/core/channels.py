"""Torch-Pruning's own structured pruner, which the ``torch-pruning`` method runs.

The heuristic a practitioner reaches for (Torch-Pruning's ``BasePruner`` with its magnitude or Taylor
importance, then fine-tuning), run through the library itself, not re-implemented. Each dependency
group loses the same fraction of its channels (Torch-Pruning's uniform ``pruning_ratio``), the
fraction a unit-level budget removes. Torch-Pruning prunes the units a unit-level budget can remove
(:func:`bayesprune.core.structure.unit_groups`) and no others: every ``Linear``/``Conv`` that produces
none of them (the output layer, a normalised residual stream) is one of its ``ignored_layers``. The
heads of timm's and ``transformers``' attention lose whole heads, as a unit budget removes them:
Torch-Pruning's ``num_heads`` (each query/key/value ``Linear`` → its module's head count) with
``prune_num_heads`` and the same ratio (:func:`heads_removed` of each module's heads per layer, of all
of them globally), its head widths kept (``prune_head_dims = False``); the module's head count follows
(:func:`bayesprune.core.heads.set_heads`).

An ``nn.MultiheadAttention`` (torchvision's ViT, ``nn.TransformerEncoderLayer``) reads its packed
in-projection as a weight, so Torch-Pruning's pruner sees no query/key/value layer there and would
keep its heads (it can prune only its embedding, which is no unit). Its heads, and those of a
:class:`~bayesprune.core.heads.HeadsRemovedAttention`, are scored and chosen here as Torch-Pruning
scores and chooses timm's heads (:func:`head_scores`, :func:`heads_kept`), and removed by
:func:`bayesprune.core.structure.remove_units`.
"""

import copy
import math
import warnings

import torch
from torch import nn

from bayesprune.core.export import count_macs
from bayesprune.core.heads import ATTENTION, set_heads
from bayesprune.core.structure import example_input, remove_units, unit_groups

#: Torch-Pruning's importance criteria offered (the ``torch-pruning`` method's ``importance``).
IMPORTANCES = ("magnitude", "taylor")
#: How the channels to remove are chosen: the same fraction of each group, or the lowest-ranked of all.
SCOPES = ("layer", "global")


def importance_of(name: str):
    """Torch-Pruning's importance ``name``: L2 magnitude of a group's weights, or first-order Taylor
    (|w · ∂L/∂w|, gradients read from the parameters)."""
    import torch_pruning as tp

    if name == "magnitude":
        return tp.importance.MagnitudeImportance(p=2)
    if name == "taylor":
        return tp.importance.TaylorImportance()
    raise ValueError(f"unknown Torch-Pruning importance {name!r} (one of {list(IMPORTANCES)})")


def ignored_layers(net: nn.Module, input_shape, *, groups=None) -> list:
    """Paths of the ``Linear``/``Conv`` layers Torch-Pruning leaves whole: those that produce no unit
    group (see the module). ``groups``: ``net``'s :func:`~bayesprune.core.structure.unit_groups`, when
    already found."""
    pruned = {
        name
        for group in (unit_groups(net, input_shape) if groups is None else groups)
        if not isinstance(net.get_submodule(group.name), ATTENTION)
        for name in group.producers
    }
    weighted = (nn.Linear, nn.modules.conv._ConvNd)
    return [name for name, module in net.named_modules() if isinstance(module, weighted) and name not in pruned]


def prune_channels(
    net: nn.Module, input_shape, *, ratio: float, importance: str = "magnitude", ignored=None, scope: str = "layer"
):
    """Prune ``net`` in place with Torch-Pruning's ``BasePruner``: each group loses ``ratio`` of its
    channels (``scope = "layer"``), or ``ratio`` of all channels goes to the lowest-ranked across groups
    (``"global"``: Torch-Pruning's ``global_pruning``), ranked by ``importance`` (for ``"taylor"``, the
    gradients already in the parameters' ``.grad``); the heads of each ``nn.MultiheadAttention`` go at
    the same ratio (:func:`heads_kept`), scored before any removal. ``ignored``: module paths left whole
    (default :func:`ignored_layers`; an attention module's path keeps its heads). Returns ``net``."""
    import torch_pruning as tp

    groups = unit_groups(net, input_shape)
    ignored = ignored_layers(net, input_shape, groups=groups) if ignored is None else ignored
    heads = [g for g in groups if g.heads_of is not None and not isinstance(net.get_submodule(g.name), ATTENTION)]
    packed = [g for g in groups if isinstance(net.get_submodule(g.name), ATTENTION) and g.name not in ignored]
    num_heads = {net.get_submodule(name): group.units for group in heads for name in group.producers}
    head_ratio, head_ratios = _head_ratios(net, heads, ratio, scope)
    with warnings.catch_warnings():
        # parameters of no layer (a ViT's class token, position embedding) are cut along their last
        # dimension of more than one entry, as :func:`bayesprune.core.structure.dependency_graph` says:
        # Torch-Pruning's default, which it announces once per pruner (every candidate of a bisection)
        warnings.filterwarnings("ignore", "Unwrapped parameters detected", UserWarning)
        pruner = tp.pruner.BasePruner(
            net,
            example_input(net, input_shape, batch=1),
            importance=importance_of(importance),
            pruning_ratio=ratio,
            global_pruning=scope == "global",
            ignored_layers=[net.get_submodule(name) for name in ignored],
            num_heads=num_heads,
            prune_num_heads=bool(num_heads),
            prune_head_dims=False,
            head_pruning_ratio=head_ratio,
            head_pruning_ratio_dict=head_ratios,
        )
    scores = {group.gate_site: head_scores(net.get_submodule(group.name), importance) for group in packed}
    pruner.step()
    for group in heads:
        set_heads(net.get_submodule(group.heads_of), pruner.num_heads[net.get_submodule(group.name)], group.block)
    masks = {site: keep for site, keep in heads_kept(scores, ratio, scope).items() if not keep.all()}
    if masks:
        remove_units(net, masks, input_shape=input_shape)
    return net


def head_scores(attention: nn.Module, importance: str) -> torch.Tensor:
    """``(heads,)``: Torch-Pruning's score of each head of ``attention`` (``nn.MultiheadAttention`` or a
    :class:`~bayesprune.core.heads.HeadsRemovedAttention`), the score ``BasePruner`` gives a head of
    timm's fused ``qkv`` (the group of its ``qkv`` rows and its ``proj`` columns), here of the packed
    ``in_proj_weight``'s rows and ``out_proj.weight``'s columns. Each channel c of the heads' width scores
    the sum, over its query, key and value rows and its output-projection column, of |w|² (magnitude:
    ``MagnitudeImportance(p=2)`` sums |w|^p, no root) or |w · ∂L/∂w| (Taylor); divided by the mean over
    the channels (its ``normalizer = "mean"``, which also cancels its ``group_reduction = "mean"``
    divisor, the count of layers); a head scores the mean of its channels (``head_imp``). Biases are left
    out, as its default ``bias = False`` leaves them. One deviation: channels that all score 0 (no
    gradient reached them) stay 0, where Torch-Pruning's division gives NaN."""
    parts = (attention.in_proj_weight, attention.out_proj.weight)
    if importance == "taylor" and any(param.grad is None for param in parts):
        raise ValueError("Taylor importance reads the gradients in .grad, and an attention module's weights have none")
    with torch.no_grad():
        rows, columns = (param.square() if importance == "magnitude" else (param * param.grad).abs() for param in parts)
    channels = rows.sum(1).view(3, -1).sum(0) + columns.sum(0)
    mean = channels.mean()
    return (channels / mean if mean > 0 else channels).view(attention.num_heads, -1).mean(1)


def heads_kept(scores: dict, ratio: float, scope: str) -> dict:
    """Site → boolean mask of the heads kept (``True``), from each attention's :func:`head_scores`, as
    ``BasePruner`` chooses timm's heads at ``head_pruning_ratio = ratio``. ``"layer"``: each module loses
    its :func:`heads_removed` lowest-scored heads. ``"global"``: the heads of all modules are ranked
    together by their scores (each relative to its own module's mean, so comparable across modules), the
    :func:`heads_removed` lowest of all of them go (every head scoring at most the last of them), as
    Torch-Pruning ranks its heads apart from the channels (in a network that also has timm-style heads,
    Torch-Pruning ranks those among themselves). Unlike Torch-Pruning, no module loses every head: its best
    one stays."""
    removed = {}
    if scope == "layer":
        for site, score in scores.items():
            removed[site] = score.topk(heads_removed(ratio, len(score)), largest=False).indices
    elif scores:
        every = torch.cat(list(scores.values()))
        count = heads_removed(ratio, len(every))
        threshold = every.topk(count, largest=False).values[-1] if count > 0 else -math.inf
        removed = {site: (score <= threshold).nonzero().flatten() for site, score in scores.items()}
    masks = {}
    for site, score in scores.items():
        keep = torch.ones(len(score), dtype=torch.bool)
        keep[removed[site]] = False
        if not keep.any():
            keep[score.argmax()] = True
        masks[site] = keep
    return masks


def heads_removed(ratio: float, heads: int) -> int:
    """The heads that leave at ``ratio`` of ``heads`` (a module's per layer, all modules' globally):
    ⌊ratio · heads⌋, never all. Rounded down where Torch-Pruning rounds up (⌈ratio · heads⌉ per layer,
    heads − ⌊(1 − ratio) · heads⌋ globally, as a channel group keeps ⌊(1 − ratio) · channels⌋): heads are
    coarse (a quarter of a block's attention each of 4), and rounding up removes one more as soon as the
    ratio passes a multiple of 1/heads, so that a bisection on the ratio (:func:`pruned_to_macs`) jumped
    from above a MAC target to well below it (a torchvision ViT of 4 blocks of 4 heads at a target of 50 %
    of the dense MACs: 36.3 % per layer, 47.6 % globally; rounded down 49.8 % and 50.0 %). Rounding down
    has its steps too, where fewer heads make each larger: 2 blocks of 4 heads, globally, 46.7 % (49.9 %
    rounded up); per layer 49.7 % (45.8 %)."""
    return min(math.floor(ratio * heads + 1e-9), heads - 1)


def _head_ratios(net: nn.Module, heads: list, ratio: float, scope: str) -> tuple:
    """``(head_pruning_ratio, head_pruning_ratio_dict)`` that make Torch-Pruning's rounding up remove
    :func:`heads_removed` heads of the groups ``heads``: per layer of each (a query/key/value layer → its
    ratio), globally of all of them together; a ratio between one head fewer and that count
    (``ceil(k - 1/2) = k``), 0 where none leave."""

    def between(removed, count):
        return max(removed - 0.5, 0) / count

    if scope == "global":
        total = sum(group.units for group in heads)
        return (between(heads_removed(ratio, total), total) if total else ratio), None
    return ratio, {
        net.get_submodule(name): between(heads_removed(ratio, group.units), group.units)
        for group in heads
        for name in group.producers
    }


def pruned_to_macs(
    net: nn.Module, input_shape, macs: int, *, importance="magnitude", ignored=None, scope: str = "layer", steps=12
):
    """``(pruned copy, its MACs, ratio)``: ``net`` pruned by :func:`prune_channels` (``importance``, ``scope``;
    for ``"taylor"``, the gradients in ``net``'s ``.grad``, copied to every candidate) at the ratio, found by
    bisection on (0, 0.95), whose MACs (:func:`bayesprune.core.export.count_macs`) are the most at or below
    ``macs`` (the closest above where no ratio reaches it)."""
    low, high, best = 0.0, 0.95, None
    for _ in range(steps):
        ratio = (low + high) / 2
        candidate = copy.deepcopy(net)
        for copied, param in zip(candidate.parameters(), net.parameters(), strict=True):
            copied.grad = None if param.grad is None else param.grad.clone()  # deepcopy leaves them behind
        prune_channels(candidate, input_shape, ratio=ratio, importance=importance, ignored=ignored, scope=scope)
        got = count_macs(candidate, input_shape)
        if best is None or _preferred(got, macs) < _preferred(best[1], macs):
            best = (candidate, got, ratio)
        low, high = (ratio, high) if got > macs else (low, ratio)
    return best


def _preferred(got: int, macs: int) -> tuple:
    """Sort key of a candidate's MACs: at or below ``macs`` first, the most of them; then the fewest above."""
    return (0, -got) if got <= macs else (1, got)


def accumulate_gradients(net: nn.Module, x, y, loss, *, batch_size: int):
    """The gradient of the mean training ``loss`` over all of ``(x, y)`` in the parameters' ``.grad``
    (batches of ``batch_size``, in order): what Taylor importance reads. ``net`` is left in eval mode."""
    net.zero_grad(set_to_none=True)
    net.eval()
    for start in range(0, len(x), batch_size):
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]
        (loss(net(xb), yb) * len(xb) / len(x)).backward()


def prune_by_importance(
    net: nn.Module, dataset, *, ratio: float, importance: str, scope: str = "layer", batch_size: int
):
    """``net`` pruned in place by :func:`prune_channels` at ``ratio`` (Taylor importance from the gradient of
    the mean training loss over ``dataset``'s training rows, in batches of ``batch_size``), its gradients
    cleared; in eval mode."""
    from bayesprune.core.tasks import mean_loss

    device = next(net.parameters()).device
    if importance == "taylor":
        x, y = dataset.x_train.to(device), dataset.y_train.to(device)
        accumulate_gradients(net, x, y, mean_loss(dataset.task), batch_size=batch_size)
    prune_channels(net, tuple(dataset.input_shape), ratio=ratio, importance=importance, scope=scope)
    net.zero_grad(set_to_none=True)
    return net.eval()


def pruned_and_finetuned(net: nn.Module, dataset, *, ratio: float, importance: str, finetune_epochs: int, rule: dict):
    """A copy of the plain ``net`` pruned by :func:`prune_by_importance`, then fine-tuned ``finetune_epochs``
    epochs as the plain network was trained (``rule``: :func:`~bayesprune.core.plain.fit_plain`'s epochs, lr,
    batch size and seed) on ``net``'s device; in eval mode."""
    from bayesprune.core.plain import fit_plain

    pruned = prune_by_importance(
        copy.deepcopy(net), dataset, ratio=ratio, importance=importance, batch_size=rule["batch_size"]
    )
    if finetune_epochs:
        device = next(net.parameters()).device
        fit_plain(pruned, dataset.x_train.to(device), dataset.y_train.to(device), **{**rule, "epochs": finetune_epochs})
    return pruned.eval()


def check_prunable(net: nn.Module, input_shape):
    """Refuse, in one line, a network Torch-Pruning's pruner cannot prune: one it cannot trace, or one
    without a unit group (heads are units: :func:`prune_channels` removes them)."""
    from bayesprune.core.errors import BayesPruneError
    from bayesprune.core.structure import NotTraceable

    try:
        groups = unit_groups(net, input_shape)
    except (NotTraceable, ValueError) as error:
        raise BayesPruneError(f"Torch-Pruning's baseline: {error}") from None
    if not groups:
        raise BayesPruneError(
            "Torch-Pruning's baseline: the network has no hidden channels, units or attention heads to remove"
        )
