"""Inputs in groups: near-duplicate inputs clustered by their correlation, or named by the user, and the
importance of a group (issue 49, item 3).

Where inputs correlate almost perfectly (breast cancer's mean radius, perimeter and area), a network may use
any one of them, so no ranking of them is stable and none of them alone answers "does this measurement
matter". A group is ranked and selected as one input instead. Its importance is eq. 3.18 of paper 003 read
for the group as one node: the mean, over every path from any of its inputs to the output, of the path's
inclusion probability; every input has as many paths, so it is the mean of its inputs' ψ, and ψ_G(Z) at a
draw Z of the indicators the mean of theirs. Under the null a group's ψ is a single input's (a mean, not a
sum, keeps groups of any size on one scale); where the network uses one member of a group of k and not the
others, the group's ψ is that member's diluted by the others.
"""

import numpy as np

#: Inputs whose absolute correlation exceeds this level are grouped by default (``importance.correlation``).
DEFAULT_CORRELATION = 0.9


def correlation_groups(x, level: float = DEFAULT_CORRELATION) -> list:
    """Inputs joined by a chain of absolute correlations above ``level``: the connected components of the
    graph with an edge between inputs j and k when |corr(x_j, x_k)| > level (single linkage at ``level``).

    Args:
        x: ``(n, p)`` rows of the inputs (the training split).
        level: in (0, 1]; at 1 no two inputs are joined (only |corr| > 1 would be).

    Returns:
        Lists of input indices, each ascending, ordered by their first input; every input in one of them
        (a constant input alone).
    """
    if not 0 < level <= 1:
        raise ValueError(f"the correlation level must lie in (0, 1], got {level}")
    x = np.asarray(x, dtype=float)
    inputs = x.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        correlation = np.abs(np.corrcoef(x, rowvar=False)) if inputs > 1 else np.ones((1, 1))
    joined = np.nan_to_num(np.atleast_2d(correlation), nan=0.0) > level
    label = list(range(inputs))

    def root(j):
        while label[j] != j:
            label[j] = label[label[j]]
            j = label[j]
        return j

    for j, k in zip(*np.nonzero(np.triu(joined, 1))):
        label[max(root(j), root(k))] = min(root(j), root(k))
    groups = {}
    for j in range(inputs):
        groups.setdefault(root(j), []).append(j)
    return sorted(groups.values())


def named_groups(groups, names: list, key: str = "importance.groups") -> list:
    """The user's groups (lists of input names) as lists of input indices, every input not named alone.

    Raises:
        ValueError: naming ``key``, for a name that is no input, an input named twice or an empty group.
    """
    index = {name: j for j, name in enumerate(names)}
    seen, chosen = set(), []
    for group in groups:
        if not group:
            raise ValueError(f"{key}: a group is empty")
        for name in group:
            if name not in index:
                raise ValueError(f"{key}: {name!r} is no input of the table (its inputs: {', '.join(names)})")
            if name in seen:
                raise ValueError(f"{key}: input {name!r} is named twice")
            seen.add(name)
        chosen.append(sorted(index[name] for name in group))
    chosen += [[j] for j in range(len(names)) if names[j] not in seen]
    return sorted(chosen)


def group_names(groups: list, names: list) -> list:
    """One name per group: the input's own name, or its inputs' names joined by " + "."""
    return [" + ".join(names[j] for j in group) for group in groups]


def group_values(values, groups: list) -> np.ndarray:
    """The mean over each group's inputs along the last axis (``(..., p)`` → ``(..., len(groups))``)."""
    values = np.asarray(values, dtype=float)
    return np.stack([values[..., group].mean(axis=-1) for group in groups], axis=-1)


def pooled_group_importance(psi_draws, psi_at_p, groups: list, names: list) -> list:
    """:func:`~bayesprune.analysis.importance.pooled_importance` of the groups: every restart's ψ and every
    draw's ψ(Z) read as the group's (the mean over its inputs), so its interval, R-hat, ranks and inclusion
    probability (that some path from the group is included) are the group's own. Each row names its
    ``group`` (:func:`group_names`) in place of ``feature`` and adds ``inputs`` (the group's input names) and
    ``size``."""
    from bayesprune.analysis.importance import pooled_importance

    rows = pooled_importance(
        group_values(psi_draws, groups), group_values(psi_at_p, groups), group_names(groups, names)
    )
    return [
        {"group": row.pop("feature"), **row, "inputs": [names[j] for j in group], "size": len(group)}
        for row, group in zip(rows, groups)
    ]
