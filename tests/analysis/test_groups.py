"""Inputs in groups (issue 49, item 3): correlation clusters against a brute-force transitive closure, the
user's groups checked by name, a group's pooled importance against the draws it is read from, and the
halves' Spearman against scipy's."""

import numpy as np
import pytest
from scipy.stats import spearmanr

from bayesprune.analysis.groups import (
    correlation_groups,
    group_values,
    named_groups,
    pooled_group_importance,
)
from bayesprune.analysis.importance import half_spearman


def brute_force_groups(x, level):
    """Inputs joined by any chain of |corr| > level: the transitive closure of the adjacency matrix by
    repeated boolean matrix products, each group the set of inputs reachable from its first."""
    correlation = np.abs(np.corrcoef(x, rowvar=False))
    reach = (correlation > level) | np.eye(x.shape[1], dtype=bool)
    for _ in range(x.shape[1]):
        reach = (reach.astype(int) @ reach.astype(int)) > 0
    return sorted({tuple(np.flatnonzero(row)) for row in reach})


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("level", [0.5, 0.8, 0.9, 1.0])
def test_correlation_groups_are_the_chains_of_correlations_above_the_level(seed, level):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((200, 4))
    # near-copies of base columns with noise of several sizes, shuffled among independent columns
    columns = [base[:, k % 4] + rng.uniform(0.05, 1.0) * rng.standard_normal(200) for k in range(8)]
    x = np.column_stack(columns + [rng.standard_normal(200) for _ in range(4)])[:, rng.permutation(12)]
    assert [tuple(group) for group in correlation_groups(x, level)] == brute_force_groups(x, level)


def test_correlation_groups_keep_a_constant_input_alone_and_refuse_a_level_outside_0_1():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(50)
    x = np.column_stack([a, a + 0.01 * rng.standard_normal(50), np.ones(50), rng.standard_normal(50)])
    assert correlation_groups(x, 0.9) == [[0, 1], [2], [3]]
    for level in (0.0, 1.5, -0.2):
        with pytest.raises(ValueError, match="correlation level"):
            correlation_groups(x, level)


def test_breast_cancer_radius_perimeter_and_area_form_groups_unnamed():
    """Issue 49's done-when: at the default level the mean and worst radius, perimeter and area are one group,
    and their standard errors another, without being named."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    names = list(data.feature_names)
    groups = [{names[j] for j in group} for group in correlation_groups(data.data)]
    sizes = {"mean", "worst"}
    assert {f"{kind} {size}" for kind in sizes for size in ("radius", "perimeter", "area")} in groups
    assert {"radius error", "perimeter error", "area error"} in groups


def test_named_groups_take_the_users_groups_and_refuse_an_unknown_or_repeated_input():
    names = ["a", "b", "c", "d"]
    assert named_groups([["d", "b"]], names) == [[0], [1, 3], [2]]
    with pytest.raises(ValueError, match="importance.groups: 'z' is no input"):
        named_groups([["a", "z"]], names)
    with pytest.raises(ValueError, match="importance.groups: input 'a' is named twice"):
        named_groups([["a", "b"], ["a"]], names)


def test_a_groups_pooled_importance_is_read_from_its_inputs_draws():
    rng = np.random.default_rng(0)
    draws = rng.random((3, 50, 4)) * (rng.random((3, 50, 4)) < 0.6)  # ψ(Z) is 0 where no path is included
    at_p = rng.random((3, 4))
    groups, names = [[0, 2], [1], [3]], ["a", "b", "c", "d"]
    rows = pooled_group_importance(draws, at_p, groups, names)
    assert [row["group"] for row in rows] == ["a + c", "b", "d"] and rows[0]["inputs"] == ["a", "c"]
    np.testing.assert_allclose(
        [row["psi"] for row in rows], [at_p[:, [0, 2]].mean(), at_p[:, 1].mean(), at_p[:, 3].mean()]
    )
    # inclusion of a group: some path from one of its inputs is included, counted draw by draw
    either = ((draws[:, :, 0] > 0) | (draws[:, :, 2] > 0)).mean()
    assert rows[0]["inclusion_probability"] == pytest.approx(either)
    np.testing.assert_allclose(group_values(at_p, groups)[:, 0], (at_p[:, 0] + at_p[:, 2]) / 2)


def test_half_spearman_is_scipys_between_the_two_halves_of_the_restarts():
    rng = np.random.default_rng(1)
    at_p = rng.random((5, 7))
    expected = spearmanr(at_p[:2].mean(axis=0), at_p[2:4].mean(axis=0))[0]  # the fifth restart left out
    assert half_spearman(at_p) == pytest.approx(expected)
    assert np.isnan(half_spearman(at_p[:1])) and np.isnan(half_spearman(np.ones((4, 3))))
