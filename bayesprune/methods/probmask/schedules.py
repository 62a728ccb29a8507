"""ProbMask's schedules, as pure functions of the epoch: :func:`cubic_keep_ratio` and
:func:`annealed_temperature` are the per-epoch remaining ratio and Concrete temperature (paper 002,
eq. 7 and Algorithm 1).
"""


def cubic_keep_ratio(epoch: int, *, start: int, end: int, final: float) -> float:
    """ProbMask's remaining ratio k at ``epoch`` t (paper 002, eq. 7, after Zhu & Gupta, 2017):
    1 until t₁ = ``start``, k_f + (1 − k_f)(1 − (t − t₁)/(t₂ − t₁))³ from t₁ to t₂ = ``end``, then
    k_f = ``final``."""
    if epoch <= start:
        return 1.0
    if epoch >= end:
        return final
    return final + (1 - final) * (1 - (epoch - start) / (end - start)) ** 3


def annealed_temperature(epoch: int, epochs: int) -> float:
    """ProbMask's temperature τ = 0.97(1 − t/T) + 0.03 at epoch t of T (paper 002, Algorithm 1, line 3)."""
    return 0.97 * (1 - epoch / epochs) + 0.03
