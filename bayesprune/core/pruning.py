"""Pruning is one operation: scores plus a :class:`Budget` give boolean masks; export applies them.

Scores are keyed by site name (inclusion probabilities, gate parameters, saliencies; higher = keep);
no function here knows which method produced them. Weight-level masks are keyed by the same site
names; unit-level masks by ``"<layer>.gate"``, one per unit group of Torch-Pruning's dependency
graph (:func:`bayesprune.core.structure.unit_groups`: a hidden layer of a plain chain, or the channels a
residual stage ties together).
"""

import math
from dataclasses import dataclass

import torch

from bayesprune.core.structure import kept_entries, unit_groups
from bayesprune.core.validation import MAX_ELEMENTS, is_int, is_number, require

SCOPES = ("global", "layer")
LEVELS = ("weight", "unit")


@dataclass(frozen=True)
class Budget:
    """How much to keep: exactly one of ``sparsity``, ``keep``, ``threshold`` and ``macs``.

    Attributes:
        sparsity: the fraction of the entries removed, in [0, 1): ``floor(sparsity · n)`` of them (the
            product is rounded to 6 decimals first, so 0.29 · 100 removes 29). ``fraction`` before.
        keep: number of entries kept.
        threshold: keep the entries whose score is at least this.
        macs: at unit level, the fraction of the dense network's multiply-accumulates to keep, in (0, 1]:
            units leave in the order of their scores (the floors kept) until the MACs of what is left
            (:func:`bayesprune.core.export.count_macs`) are at most ``macs · dense_macs``. It is resolved to
            a ``keep`` budget by :func:`bayesprune.core.macs.resolve_macs`, which needs the network.
        dense_macs: the MACs ``macs`` is a fraction of (the network the user brought, when a fit already
            removed units); ``None``: those of the network pruned.
        scope: ``"global"`` ranks all sites together; ``"layer"`` applies the budget to each site
            (weight level) or layer (unit level) separately.
        level: ``"weight"`` masks entries of every site; ``"unit"`` masks the hidden units
            (filters) of each layer, scored per unit (gate sites, or :func:`unit_scores`).
        min_keep: floor per site (weight level) or per layer (unit level): at least this many of
            its highest-scoring entries are kept. The floors are kept first; the rest of the count
            goes by rank, so the total is the count asked for, or the sum of the floors if that is
            larger. ``None`` (the default, in Python, in ``prune.min_keep`` and in ``export
            --budget``): no floor at weight level; at unit level a tenth of each layer's units,
            at least one (:func:`default_floor`), so that a global budget leaves no layer a
            bottleneck of one channel. ``0`` lets a unit budget empty a layer.

    Ties are broken by position: among equal scores, entries of earlier sites, and earlier entries
    within a site, are removed first. Ranking is in float64, so pass scores in a form that does not
    saturate (logits rather than probabilities rounded to 1).
    """

    sparsity: float | None = None
    keep: int | None = None
    threshold: float | None = None
    macs: float | None = None
    dense_macs: int | None = None
    scope: str = "global"
    level: str = "weight"
    min_keep: int | None = None

    #: Fields of ``bayesprune export --budget`` read under their old names, each with a one-line note.
    renamed = {"fraction": "sparsity"}

    def __post_init__(self):
        given = [name for name in ("sparsity", "keep", "threshold", "macs") if getattr(self, name) is not None]
        require(len(given) == 1, "budget", "set exactly one of sparsity, keep, threshold and macs", given)
        if self.sparsity is not None:
            require(
                is_number(self.sparsity) and 0 <= self.sparsity < 1, "budget.sparsity", "lie in [0, 1)", self.sparsity
            )
        if self.keep is not None:
            require(
                is_int(self.keep) and 0 <= self.keep <= MAX_ELEMENTS,
                "budget.keep",
                f"be a non-negative integer up to {MAX_ELEMENTS}",
                self.keep,
            )
        if self.threshold is not None:
            require(is_number(self.threshold), "budget.threshold", "be a finite number", self.threshold)
        require(self.scope in SCOPES, "budget.scope", f"be one of {list(SCOPES)}", self.scope)
        require(self.level in LEVELS, "budget.level", f"be one of {list(LEVELS)}", self.level)
        if self.macs is not None:
            require(is_number(self.macs) and 0 < self.macs <= 1, "budget.macs", "lie in (0, 1]", self.macs)
            require(
                self.level == "unit",
                "budget.macs",
                "come with level = 'unit' (zeroed weights cost as many MACs as kept ones)",
                self.level,
            )
            require(self.scope == "global", "budget.macs", "come with scope = 'global'", self.scope)
            require(self.min_keep != 0, "budget.min_keep", "be at least 1 beside macs (a network keeps every layer)", 0)
        require(
            self.dense_macs is None or (is_int(self.dense_macs) and self.dense_macs > 0 and self.macs is not None),
            "budget.dense_macs",
            "be a positive integer, given with macs",
            self.dense_macs,
        )
        require(
            self.min_keep is None or is_int(self.min_keep) and 0 <= self.min_keep <= MAX_ELEMENTS,
            "budget.min_keep",
            f"be a non-negative integer up to {MAX_ELEMENTS}",
            self.min_keep,
        )

    def floor(self, size: int) -> int:
        """How many of the ``size`` entries of one site (weight level) or units of one layer (unit
        level) are kept whatever their scores."""
        if self.min_keep is not None:
            return min(self.min_keep, size)
        return default_floor(size) if self.level == "unit" else 0


#: The share of each layer's units a unit-level budget keeps by default (:attr:`Budget.min_keep`).
#: Measured on torchvision's resnet18 with random scores: at half the units removed globally, a floor
#: of one unit leaves layers of one channel, a tenth leaves none under a tenth of its width.
UNIT_FLOOR_SHARE = 0.1


def default_floor(units: int) -> int:
    """The default number of a layer's ``units`` a unit budget keeps: ``max(1, ceil(0.1 · units))``."""
    return min(units, max(1, math.ceil(UNIT_FLOOR_SHARE * units)))


def prune(scores: dict, budget: Budget, *, net=None, input_shape=None) -> dict:
    """Boolean masks (``True`` = keep) of the entries ``budget`` keeps, on the scores' devices.

    Args:
        scores: site name → score tensor, higher = keep. At unit level, either one score per unit
            under ``"<layer>.gate"`` or weight scores, reduced per unit by :func:`unit_scores`.
        budget: what to keep.
        net: the network, needed at unit level to know which weights form a unit.
        input_shape: one input's shape, to trace ``net`` at unit level (default:
            :func:`bayesprune.core.structure.input_shape_of`).

    Returns:
        Weight level: a mask per site of ``scores``. Unit level: a mask of shape ``(units,)`` per
        unit group under ``"<root>.gate"`` (the output layer's units are never removed);
        :func:`expand_unit_masks` turns them into weight masks.
    """
    return next(prune_each(scores, [budget], net=net, input_shape=input_shape))


def prune_each(scores: dict, budgets, *, net=None, input_shape=None):
    """:func:`prune` at each of ``budgets`` (all of one level and scope), the scores ranked once: yields
    the masks of each budget in turn (the points of a pruning curve, one held at a time)."""
    budgets = list(budgets)
    if not scores:
        raise ValueError("no scores to prune")
    if not budgets:
        return
    level, scope = budgets[0].level, budgets[0].scope
    if any((budget.level, budget.scope) != (level, scope) for budget in budgets):
        raise ValueError("prune_each takes budgets of one level and one scope")
    if any(budget.macs is not None for budget in budgets):
        raise ValueError("a MAC budget is resolved on the network first: bayesprune.core.macs.resolve_macs")
    if level == "unit":
        if net is None:
            raise ValueError("a unit-level budget needs the network (net=...)")
        scores = unit_scores(scores, net, input_shape=input_shape)
    groups = [dict(scores)] if scope == "global" else [{name: score} for name, score in scores.items()]
    rankings = [_ranking(group) for group in groups]
    for budget in budgets:
        yield {name: mask for ranking in rankings for name, mask in _select(ranking, budget).items()}


def _ranking(scores: dict) -> tuple:
    """``(scores, flat, order)``: the scores in one float64 vector and its removal order (lowest first,
    earlier position first on ties)."""
    for name, score in scores.items():
        if torch.isnan(score).any():
            raise ValueError(f"the scores of site {name!r} contain NaN")
    device = next(iter(scores.values())).device
    flat = torch.cat([score.detach().flatten().to(device, torch.float64) for score in scores.values()])
    return scores, flat, torch.argsort(flat, stable=True)


def _select(ranking: tuple, budget: Budget) -> dict:
    scores, flat, order = ranking
    n = flat.numel()
    keep = torch.zeros(n, dtype=torch.bool, device=flat.device)
    forced = torch.zeros_like(keep)
    start = 0
    for score in scores.values():
        size = score.numel()
        floor = budget.floor(size)
        if floor:
            local = torch.argsort(flat[start : start + size], stable=True)[size - floor :]
            forced[start + local] = True
        start += size
    if budget.threshold is not None:
        keep = flat >= budget.threshold
    else:
        count = n - math.floor(round(budget.sparsity * n, 6)) if budget.sparsity is not None else min(budget.keep, n)
        candidates = order[~forced[order]] if forced.any() else order
        extra = max(count - int(forced.sum()), 0)
        keep[candidates[candidates.numel() - extra :]] = True
    keep |= forced
    sizes = [score.numel() for score in scores.values()]
    return {
        name: chunk.view(score.shape).to(score.device)
        for (name, score), chunk in zip(scores.items(), torch.split(keep, sizes))
    }


def unit_scores(scores: dict, net, *, reduce: str = "mean", input_shape=None) -> dict:
    """One score per unit (filter) of every unit group (:func:`bayesprune.core.structure.unit_groups`),
    keyed ``"<root>.gate"``.

    A ``"<root>.gate"`` entry of ``scores`` is taken as it is; otherwise the unit's score is the
    ``reduce`` (``"mean"``, ``"max"`` or ``"sum"``) of the scores of its incoming weights (its row
    of a ``Linear``, its kernel across input channels of a ``Conv``, in every ``Linear``/``Conv``
    that produces the group's channels: a residual stage's convolutions and projection together; a
    head's query, key and value rows, :meth:`~bayesprune.core.structure.UnitGroup.weight_rows`),
    e.g. the mean inclusion probability of the unit's weights. Biases and batch norms are not
    counted. The group feeding the output has no gate.
    """
    reducers = {"mean": torch.mean, "max": lambda x, dim: torch.max(x, dim=dim).values, "sum": torch.sum}
    if reduce not in reducers:
        raise ValueError(f"reduce must be one of {sorted(reducers)}, got {reduce!r}")
    units = {}
    for group in unit_groups(net, input_shape):
        if group.gate_site in scores:
            units[group.gate_site] = scores[group.gate_site]
            continue
        rows = [
            scores[site].detach().to(torch.float64).flatten(1)[index.to(scores[site].device)].flatten(1)
            for site, index in group.weight_rows(net)
            if site in scores
        ]
        if not rows:
            raise ValueError(
                f"no score for layer {group.name!r}: expected {group.gate_site!r} or {group.weight_rows(net)[0][0]!r}"
            )
        device = rows[0].device
        units[group.gate_site] = reducers[reduce](torch.cat([row.to(device) for row in rows], dim=1), dim=1)
    return units


def expand_unit_masks(net, unit_masks: dict, *, input_shape=None) -> dict:
    """Weight-level masks equivalent to removing the masked units: for every parameter that
    removing them shrinks, the entries that stay (:func:`bayesprune.core.structure.kept_entries`): each
    removed unit's rows and biases in all its group's producers, its batch-norm weight and bias,
    and its columns (input channels, a flattened channel's H·W columns) in every consumer. With
    them zeroed, a network in eval mode computes what the smaller network of
    :func:`bayesprune.core.export.export` computes."""
    masks = {}
    params = dict(net.named_parameters())
    for name, (kept, _) in kept_entries(net, unit_masks, input_shape=input_shape).items():
        param = params[name]
        mask = torch.zeros(param.numel(), dtype=torch.bool, device=param.device)
        mask[kept.to(param.device)] = True
        masks[name] = mask.view(param.shape)
    return masks


def apply_masks(params: dict, masks: dict) -> dict:
    """Zero the masked-out entries of every tensor that has a mask."""
    return {name: value * masks[name] if name in masks else value for name, value in params.items()}


def bias_sites(net) -> set:
    """Site names of the biases of ``net``'s modules (``"<module>.bias"``)."""
    return {
        f"{name}.bias" if name else "bias"
        for name, module in net.named_modules()
        if isinstance(getattr(module, "bias", None), torch.nn.Parameter)
    }


def sparsity(masks: dict) -> float:
    """Fraction of entries removed: 1 − |w ≠ 0| / |w| (paper 003, section 4.4)."""
    kept = sum(int(mask.sum()) for mask in masks.values())
    total = sum(mask.numel() for mask in masks.values())
    return 1.0 - kept / total


def lexicographic_ranks(primary: dict, secondary: dict) -> dict:
    """Scores without ties that order the entries by ``primary`` and, among equal ``primary`` scores,
    by ``secondary`` (both keyed by site): each entry's rank 0 … n − 1 over all sites, in float64.

    For scores that saturate by design (keep-probabilities clamped to exactly 1), so that a budget
    does not fall back on network order among them.
    """
    sizes = [score.numel() for score in primary.values()]
    first = torch.cat([score.detach().flatten().double().cpu() for score in primary.values()])
    second = torch.cat([secondary[site].detach().flatten().double().cpu() for site in primary])
    order = torch.argsort(second, stable=True)
    order = order[torch.argsort(first[order], stable=True)]
    ranks = torch.empty_like(first)
    ranks[order] = torch.arange(first.numel(), dtype=torch.float64)
    return {
        site: chunk.view(score.shape).to(score.device)
        for (site, score), chunk in zip(primary.items(), torch.split(ranks, sizes))
    }
