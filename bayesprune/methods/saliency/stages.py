"""Multi-stage pruning without weight updates between the stages, and what pruning costs (paper 001,
Algorithm 1 without its fine-tuning, eq. 1), over any criterion of :mod:`bayesprune.core.criteria`.
"""

import copy
import math

import torch
from torch.func import functional_call

from bayesprune.core.criteria import CRITERIA, loss_kind_of, mean_loss_of_kind, saliency, weight_sites
from bayesprune.core.loop import check_stop
from bayesprune.core.pruning import Budget, apply_masks, prune
from bayesprune.core.validation import is_int, require
from bayesprune.methods.saliency.schedules import sparsity_schedule


def pruning_stages(
    net,
    criterion: str,
    sparsity: float,
    *,
    x,
    y,
    stages: int,
    schedule: str = "exponential",
    penalty: float = 0.0,
    examples_per_stage: int = 1000,
    loss=None,
    loss_kind=None,
    generator=None,
):
    """Prune ``net`` in π = ``stages`` stages without updating the weights in between (paper 001,
    Algorithm 1 without its fine-tuning): an iterator of ``(κ_i, masks, scores)`` after every stage,
    ``scores`` the saliencies the stage ranked by.

    At stage i the scores of ``criterion`` are computed on the masked network θ ⊙ m from
    ``examples_per_stage`` examples of ``(x, y)`` drawn at random (1000 in the paper, appendix B.2),
    with the step-size ``penalty`` λ of :func:`~bayesprune.core.criteria.saliency`; the weights pruned
    earlier score −∞ so that they stay pruned, and the new mask keeps the (1 − κ_i)·D highest-scoring
    weights over all sites together (exactly ``floor(κ_i·D)`` removed,
    :class:`~bayesprune.core.pruning.Budget`), κ_i of :func:`~.schedules.sparsity_schedule`. The masks
    are nested, the last one is at ``sparsity``; ``net`` is not changed (a copy is masked). Biases
    are not pruned.

    Args:
        net: the trained network.
        criterion: a criterion of :data:`~bayesprune.core.criteria.CRITERIA`.
        sparsity: κ, the fraction of the weights removed in the end, in [0, 1).
        x, y: the training set the examples are drawn from.
        stages: π ≥ 1; one stage is one-shot pruning.
        schedule: ``"exponential"`` or ``"linear"`` (:func:`~.schedules.sparsity_schedule`).
        penalty: λ ≥ 0 (section 3.2).
        examples_per_stage: examples drawn per stage (all of them, in random order, if fewer).
        loss, loss_kind, generator: as in :func:`~bayesprune.core.criteria.saliency`; ``generator`` also
            draws the examples.
    """
    require(
        is_int(examples_per_stage) and examples_per_stage > 0,
        "examples_per_stage",
        "be a positive integer",
        examples_per_stage,
    )
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {sorted(CRITERIA)}, got {criterion!r}")
    sparsities = sparsity_schedule(sparsity, stages, schedule)
    options = {"loss": loss, "loss_kind": loss_kind, "generator": generator, "penalty": penalty}
    return _stages(copy.deepcopy(net), criterion, sparsities, x, y, examples_per_stage, options)


def _stages(masked, criterion, sparsities, x, y, examples_per_stage, options):
    masks = {site: torch.ones_like(masked.get_parameter(site), dtype=torch.bool) for site in weight_sites(masked)}
    for kappa in sparsities:
        check_stop(f"while pruning to sparsity {kappa:.4g}")
        rows = torch.randperm(len(x), generator=options["generator"])[:examples_per_stage].to(x.device)
        scores = saliency(criterion, masked, x=x[rows], y=y[rows], **options)
        masks = prune(
            {site: score.masked_fill(~masks[site], -math.inf) for site, score in scores.items()}, Budget(sparsity=kappa)
        )
        with torch.no_grad():
            for site, mask in masks.items():
                masked.get_parameter(site).mul_(mask)
        yield kappa, masks, scores


def multi_stage_masks(net, criterion: str, sparsity: float, **options) -> dict:
    """The masks of the last stage of :func:`pruning_stages` (same arguments): Algorithm 1 of paper 001
    without fine-tuning, at sparsity κ = ``sparsity``."""
    for _, masks, _ in pruning_stages(net, criterion, sparsity, **options):  # noqa: B007  (the last stage's)
        pass
    return masks


def loss_change(net, masks: dict, x, y, *, loss_kind=None) -> float:
    """ΔL(θ, Δθ) = |L(θ ⊙ m) − L(θ)| (paper 001, eq. 1; the metric of section 4) on ``(x, y)``, L the mean
    loss of ``loss_kind`` (:func:`~bayesprune.core.criteria.loss_kind_of`) and ``masks`` keyed by parameter name."""
    kind = loss_kind_of(y, loss_kind)
    params = {name: param.detach() for name, param in net.named_parameters()}
    with torch.no_grad():
        dense = mean_loss_of_kind(functional_call(net, params, (x,)), y, kind)
        pruned = mean_loss_of_kind(functional_call(net, apply_masks(params, masks), (x,)), y, kind)
    return float((pruned - dense).abs())
