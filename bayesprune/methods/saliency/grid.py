"""One point of the saliency method's grid: a criterion pruned in stages at one sparsity, and the
rank correlations that compare its points."""

import math
from dataclasses import dataclass

import numpy as np
import torch

from bayesprune.core.criteria import weight_sites
from bayesprune.core.pruning import lexicographic_ranks
from bayesprune.core.statistics import spearman
from bayesprune.core.tasks import masked_copy, network_test_metric
from bayesprune.methods.saliency.stages import loss_change, pruning_stages


def prune_in_stages(net, criterion: str, sparsity: float, *, stages: int, **options) -> tuple:
    """Algorithm 1 of paper 001 without fine-tuning (:func:`.stages.pruning_stages`, same
    arguments): the mask after π = ``stages`` stages, and scores that rank the weights in the order
    they were pruned.

    Returns:
        ``(masks, ranks)``: boolean masks of the weight sites (``floor(κ·D)`` removed), and float64
        ranks 0 … D − 1 without ties ordering the weights by the stage that pruned them (kept weights
        last) and, within a stage, by their saliency at that stage (the last stage's for the kept
        weights), ties by position; a budget at ``sparsity`` over the ranks keeps exactly ``masks``.
    """
    masks = {site: torch.ones_like(net.get_parameter(site), dtype=torch.bool) for site in weight_sites(net)}
    stage_of = {
        site: torch.full(mask.shape, math.inf, dtype=torch.float64, device=mask.device) for site, mask in masks.items()
    }
    value_at = {site: torch.zeros(mask.shape, dtype=torch.float64, device=mask.device) for site, mask in masks.items()}
    for stage, (_, new, scores) in enumerate(
        pruning_stages(net, criterion, sparsity, stages=stages, **options), start=1
    ):
        for site in masks:
            dropped = masks[site] & ~new[site]
            stage_of[site][dropped] = stage
            value_at[site][dropped] = scores[site][dropped]
        masks = new
    for site, mask in masks.items():
        value_at[site][mask] = scores[site][mask]
        stage_of[site][mask] = stages + 1
    return masks, lexicographic_ranks(stage_of, value_at)


def spearman_or_none(a, b):
    """Spearman's rank correlation (:func:`bayesprune.core.statistics.spearman`, ties at their average rank);
    ``None`` with fewer than three pairs, a non-finite value, or a constant sequence (undefined)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size < 3 or a.size != b.size or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return None
    rho = spearman(a, b)
    return None if math.isnan(rho) else rho


@dataclass
class GridPoint:
    """One criterion × π × λ: its mask, ranks, and numbers (``error_after_finetune`` is ``None`` until
    fine-tuned)."""

    criterion: str
    stages: int
    penalty: float
    masks: dict
    ranks: dict
    delta_loss: float
    error_after_pruning: float
    error_after_finetune: float | None = None


def grid_points(net, data, options, train: tuple, held: tuple, *, loss, seed: int) -> list:
    """A :class:`GridPoint` for every criterion, number of stages and penalty of ``options``: its masks pruned
    from ``net`` on the ``train`` rows, ΔL of eq. 1 on the ``held`` rows, and the pruned network's test metric."""
    x_train, y_train = train
    x_loss, y_loss = held
    points = []
    for criterion in options.criteria:
        for stages in options.stages:
            for penalty in options.penalties:
                masks, ranks = prune_in_stages(
                    net,
                    criterion,
                    options.sparsity,
                    x=x_train,
                    y=y_train,
                    stages=stages,
                    schedule=options.schedule,
                    penalty=penalty,
                    examples_per_stage=options.examples_per_stage,
                    loss=loss,
                    generator=torch.Generator().manual_seed(seed + 1),
                )
                pruned = masked_copy(net, masks)
                points.append(
                    GridPoint(
                        criterion,
                        stages,
                        penalty,
                        masks,
                        ranks,
                        loss_change(net, masks, x_loss, y_loss),
                        network_test_metric(pruned, data),
                    )
                )
    return points
