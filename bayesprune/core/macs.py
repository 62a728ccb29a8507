"""MAC budgets: units removed by score until the network's multiply-accumulates reach a target, counted one
way everywhere (:func:`bayesprune.core.export.count_macs` of the network without those units). The expected
MACs of a network under its units' keep probabilities, for a penalty that steers gates to a target, are
:class:`bayesprune.core.unit_macs.ExpectedMacs` (exact under independent gates).

A MAC budget (:attr:`bayesprune.core.pruning.Budget.macs`) is resolved to the ``keep`` budget of the same
ranking (:func:`resolve_macs`): units leave in the order a unit budget removes them (lowest score first,
the floors kept), and the number kept is the largest whose network costs at most the target, found by
bisection on exact counts (the MACs never grow as more units leave). So the network it gives is within one
unit's MACs of the target and its count is the count of the exported network.
"""

import torch

from bayesprune.core.export import count_macs
from bayesprune.core.pruning import Budget, prune, unit_scores
from bayesprune.core.structure import input_shape_of, shrunk, unit_groups


class MacsBelowFloors(ValueError):
    """A MAC target below what the budget's floors (``min_keep``) let a network reach."""


def macs_kept(net, unit_masks: dict, *, input_shape=None) -> int:
    """:func:`~bayesprune.core.export.count_macs` of ``net`` without the units ``unit_masks`` remove
    (``"<root>.gate"`` → boolean mask, ``True`` = keep): the MACs of the network export writes."""
    input_shape = input_shape_of(net, input_shape)
    if all(bool(mask.all()) for mask in unit_masks.values()):
        return count_macs(net, input_shape)
    smaller, _ = shrunk(net, unit_masks, input_shape=input_shape)
    return count_macs(smaller, input_shape)


def floor_masks(net, budget: Budget, *, input_shape=None) -> dict:
    """The unit masks of a network cut down to ``budget``'s floors alone (``min_keep`` of every group, its
    first units): its MACs, which depend on how many units each group keeps and not on which, are the least
    any scores reach under those floors."""
    masks = {}
    for group in unit_groups(net, input_shape_of(net, input_shape)):
        mask = torch.zeros(group.units, dtype=torch.bool)
        mask[: budget.floor(group.units)] = True
        masks[group.gate_site] = mask
    return masks


def check_reachable(net, budget: Budget, *, input_shape=None) -> int:
    """The dense MACs ``budget.macs`` is a fraction of, after checking that the floors reach it.

    Raises:
        MacsBelowFloors: the network of the floors alone costs more than the target (one line saying how much).
    """
    input_shape = input_shape_of(net, input_shape)
    dense = budget.dense_macs or count_macs(net, input_shape)
    least = macs_kept(net, floor_masks(net, budget, input_shape=input_shape), input_shape=input_shape)
    if least > budget.macs * dense:
        floors = "a tenth of each layer's units" if budget.min_keep is None else f"min_keep = {budget.min_keep}"
        raise MacsBelowFloors(
            f"{budget.macs:g} of the dense MACs is below what the floors allow ({floors}): at least "
            f"{least / dense:.4g} ({least:,} of {dense:,} MACs)"
        )
    return dense


def resolve_macs(scores: dict, budget: Budget, net, *, input_shape=None) -> tuple:
    """``(keep budget, its MACs)``: the unit budget of ``budget``'s scope, level and floors that keeps the
    most units (by ``scores``, ranked as :func:`~bayesprune.core.pruning.prune` ranks them) whose network
    costs at most ``budget.macs · dense`` MACs (``dense``: ``budget.dense_macs``, else ``net``'s own).
    A target ``net`` already meets keeps every unit.

    Raises:
        MacsBelowFloors: the network of the floors alone costs more than the target (one line saying how much).
    """
    input_shape = input_shape_of(net, input_shape)
    dense = check_reachable(net, budget, input_shape=input_shape)
    units = unit_scores(scores, net, input_shape=input_shape)
    total = sum(score.numel() for score in units.values())
    target = budget.macs * dense

    def keeping(count: int) -> Budget:
        return Budget(keep=count, scope=budget.scope, level="unit", min_keep=budget.min_keep)

    def cost(count: int) -> int:
        return macs_kept(net, prune(units, keeping(count), net=net, input_shape=input_shape), input_shape=input_shape)

    floors = sum(budget.floor(score.numel()) for score in units.values())
    full = cost(total)
    if full <= target:
        return keeping(total), full
    low, high, low_cost = floors, total, None  # cost(low) <= target < cost(high)
    while high - low > 1:
        middle = (low + high) // 2
        middle_cost = cost(middle)
        if middle_cost <= target:
            low, low_cost = middle, middle_cost
        else:
            high = middle
    return keeping(low), cost(low) if low_cost is None else low_cost
