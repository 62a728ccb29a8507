"""The Euclidean projection onto ProbMask's feasible set (paper 002, Theorem 1), as pure functions.

ProbMask (paper 002) trains one inclusion probability per weight, s ∈ [0, 1]ⁿ, under a single global
budget 1ᵀs ≤ K on the expected number of kept weights (problem 2), by projected gradient descent:
after each gradient step z = s − η∇ₛL, s ← proj_C(z) (Algorithm 1, line 8), with
C = {s ∈ [0, 1]ⁿ : 1ᵀs ≤ K}. Theorem 1 (proved in appendix A.4, eqs. 19-27) gives the projection up
to one scalar, the multiplier v of the budget constraint:

    proj_C(z) = min(1, max(0, z − v₂*)),  v₂* = max(0, v₁*),  1ᵀ min(1, max(0, z − v₁*)) = K  (eq. 6).

The left side of eq. 6 is continuous and non-increasing in v₁* (eq. 25), so the root is found by
bisection, as the paper proposes. The budget is global: :func:`project_sites` projects the scores of
all layers as one vector, which lets the projection move mass between layers.
"""

import torch

from bayesprune.core.validation import is_number, require

BISECTION_STEPS = 60


def project_onto_budget(s: torch.Tensor, budget) -> torch.Tensor:
    """proj_C(s), C = {x ∈ [0, 1]ⁿ : 1ᵀx ≤ K}, K = ``budget``: Theorem 1 of paper 002.

    x = min(1, max(0, s − v)) with v = 0 when min(1, max(0, s)) already fits in the budget, and
    otherwise the root v > 0 of eq. 6, 1ᵀ min(1, max(0, s − v)) = K, so that 1ᵀx = K up to rounding.
    The root is bracketed in [0, max(s)] and halved :data:`BISECTION_STEPS` times in float64, then
    solved in closed form on the bracket's set of entries that are neither at 0 nor at 1 (between
    breakpoints eq. 6 is linear in v). This is exact up to rounding unless an entry lies within
    max(s)·2⁻⁶⁰ of a breakpoint (s = v or s = v + 1), and then off by at most that. The number of
    steps is fixed, so no step waits for the device (no host synchronisation).

    Edges: K ≥ n leaves only the clipping to [0, 1] (the budget cannot bind); K = 0 gives all zeros.

    Not differentiable: ``s`` is detached (PGD projects the parameters, Algorithm 1, line 8).

    Args:
        s: the point z to project, any shape, floating point, on any device; finite entries (not
            checked, since checking would wait for the device).
        budget: K, a finite number ≥ 0: the largest allowed sum of the result.

    Returns:
        The projection, of the shape, dtype and device of ``s``.

    Raises:
        ValueError: naming ``s`` or ``budget`` when invalid.
    """
    require(torch.is_tensor(s) and s.is_floating_point(), "s", "be a floating-point tensor", type(s))
    require(is_number(budget) and budget >= 0, "budget", "be a finite number >= 0", budget)
    if budget == 0:
        return torch.zeros_like(s)
    z = s.detach().to(torch.float64)
    if budget >= z.numel():
        return z.clamp(0, 1).to(s.dtype)
    return (z - _multiplier(z.flatten(), budget)).clamp_(0, 1).to(s.dtype)


def _multiplier(z: torch.Tensor, budget: float) -> torch.Tensor:
    """v₂* of Theorem 1 for flat float64 ``z`` and 0 < ``budget`` < len(z), as a 0-dim tensor.

    Bisection keeps g(low) > K ≥ g(high), g(v) = 1ᵀ min(1, max(0, z − v)) (eq. 25), from [0, max(z)];
    when g(0) ≤ K it shrinks to [0, 0], so v₂* = max(0, v₁*) needs no branch. On the final bracket,
    entries with z − high ≥ 1 are at 1 and those with z − low ≤ 0 at 0 for every v in it; with the
    other entries free, g(v) = K reads v = (Σ_free z + #at 1 − K) / #free.
    """
    low = z.new_zeros(())
    high = z.max().clamp_min(0)
    buffer = torch.empty_like(z)
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        over = torch.sub(z, middle, out=buffer).clamp_(0, 1).sum() > budget
        low, high = torch.where(over, middle, low), torch.where(over, high, middle)
    at_one = z - high >= 1
    free = (z - low > 0) & ~at_one
    root = (torch.where(free, z, 0).sum() + at_one.sum() - budget) / free.sum().clamp_min(1)
    return torch.minimum(torch.maximum(root, low), high)


def project_sites(scores: dict, budget) -> dict:
    """Project the scores of every site jointly onto one global budget K (paper 002, problem 2).

    The flattened tensors are concatenated into one vector, projected once by
    :func:`project_onto_budget` (Theorem 1) and split back: the sum over ALL sites is at most K, and
    one multiplier v is shared by every site, so a layer whose scores are higher keeps more of the
    budget ("vectorised over all layers at once"). This is not per-site projection with per-site
    budgets, which would fix each layer's share in advance.

    Args:
        scores: site name → tensor (e.g. each layer's inclusion probabilities after a gradient step),
            floating point, all on one device.
        budget: K, a finite number ≥ 0, for all sites together.

    Returns:
        Site name → projected tensor, of the shape and dtype of its input (an empty dict for no sites).

    Raises:
        ValueError: naming ``budget`` when invalid.
    """
    require(is_number(budget) and budget >= 0, "budget", "be a finite number >= 0", budget)
    if not scores:
        return {}
    flat = torch.cat([tensor.detach().flatten().to(torch.float64) for tensor in scores.values()])
    parts = project_onto_budget(flat, budget).split([tensor.numel() for tensor in scores.values()])
    return {name: part.view(tensor.shape).to(tensor.dtype) for (name, tensor), part in zip(scores.items(), parts)}
