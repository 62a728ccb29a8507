"""Correlation statistics of experiments and method comparisons: Pearson, average ranks, Spearman."""

import math

import numpy as np


def pearson(x, y) -> float:
    """Pearson correlation of two equally long sequences (NaN when either is constant)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 2:
        raise ValueError(f"pearson needs two 1-d sequences of equal length >= 2, got {x.shape} and {y.shape}")
    x, y = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float(x @ x) * float(y @ y))
    return float(x @ y) / denominator if denominator > 0 else float("nan")


def ranks(values) -> np.ndarray:
    """Ranks 1..n, ties sharing their average rank."""
    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="mergesort")
    result = np.empty(values.size)
    sorted_values = values[order]
    start = 0
    while start < values.size:
        stop = start
        while stop + 1 < values.size and sorted_values[stop + 1] == sorted_values[start]:
            stop += 1
        result[order[start : stop + 1]] = (start + stop) / 2 + 1
        start = stop + 1
    return result


def spearman(x, y) -> float:
    """Spearman rank correlation: the Pearson correlation of the (average) ranks."""
    return pearson(ranks(x), ranks(y))
