"""The sparsity schedule of multi-stage pruning, a pure function of the stage.

:func:`sparsity_schedule` gives the target sparsity κ_i of each stage i = 1, …, π of multi-stage
pruning without weight updates between the stages (paper 001, section 3.2 and Algorithm 1, line 5).
"""

import math

from bayesprune.core.validation import is_int, is_number, require

SPARSITY_SCHEDULES = ("linear", "exponential")


def sparsity_schedule(target: float, stages: int, kind: str = "exponential") -> list:
    """The sparsities κ_1, …, κ_π of ``stages`` = π pruning stages that end at ``target`` = κ.

    ``"linear"``: κ_i = κ·i/π, every stage removes the same number of weights.
    ``"exponential"``: κ_i = 1 − (1 − κ)^{i/π}, every stage removes the same fraction (1 − κ)^{1/π}
    of the weights still there, so fewer and fewer weights per stage (section 3.2).

    Algorithm 1 of paper 001 prints the exponential step as κ_i ← κ_{i−1} + (κ − κ_0)^{i/π}, which
    overshoots κ (with κ_0 = 0 its first step alone is κ^{1/π} > κ); the formula above is the
    schedule of the literature the paper follows (Zeng & Urtasun, 2019; Renda et al., 2020). The
    last entry is ``target`` itself, exactly (1 − (1 − κ) can differ from κ by a rounding).

    Raises:
        ConfigError: naming ``target``, ``stages`` or ``kind`` when out of range.
    """
    require(is_number(target) and 0 <= target < 1, "target", "lie in [0, 1)", target)
    require(is_int(stages) and stages > 0, "stages", "be a positive integer", stages)
    require(kind in SPARSITY_SCHEDULES, "kind", f"be one of {list(SPARSITY_SCHEDULES)}", kind)
    if kind == "linear":
        head = [target * i / stages for i in range(1, stages)]
    else:
        head = [-math.expm1(i / stages * math.log1p(-target)) for i in range(1, stages)]
    return head + [target]
