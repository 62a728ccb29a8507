"""Pruning is one operation: scores plus a budget give boolean masks; export applies them.

Scores are keyed by site name (inclusion probabilities, gate parameters, saliencies); no function here
knows which method produced them.
"""
import math

import torch


def global_masks(scores: dict, droprate: float) -> dict:
    """Drop the ``floor(droprate · n)`` lowest-scoring entries across all tensors together.

    Ties are broken by position, so the number kept is exact. Masks live on the scores' devices.

    Args:
        scores: site name → score tensor; higher means more important.
        droprate: fraction in [0, 1) of all entries to remove.
    """
    if not 0.0 <= droprate < 1.0:
        raise ValueError(f"droprate must lie in [0, 1), got {droprate}")
    flat = torch.cat([score.detach().flatten() for score in scores.values()])
    keep = torch.ones_like(flat, dtype=torch.bool)
    # Rounded first so that a decimal droprate counts exactly (0.29 · 100 is 28.999… in floating point).
    num_dropped = math.floor(round(droprate * flat.numel(), 6))
    keep[torch.argsort(flat, stable=True)[:num_dropped]] = False
    sizes = [score.numel() for score in scores.values()]
    return {
        name: chunk.view(score.shape)
        for (name, score), chunk in zip(scores.items(), torch.split(keep, sizes))
    }


def apply_masks(params: dict, masks: dict) -> dict:
    """Zero the masked-out entries of every tensor that has a mask."""
    return {name: value * masks[name] if name in masks else value for name, value in params.items()}


def sparsity(masks: dict) -> float:
    """Fraction of entries removed: 1 − |w ≠ 0| / |w| (paper 003, section 4.4)."""
    kept = sum(int(mask.sum()) for mask in masks.values())
    total = sum(mask.numel() for mask in masks.values())
    return 1.0 - kept / total
