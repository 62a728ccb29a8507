"""Model-X knockoffs (analysis/knockoffs.py): the joint covariance of (X, X̃) against its closed form, and
the knockoff(+) threshold against a brute-force scan and a hand computation."""

import numpy as np
import pytest

from bayesprune.analysis.knockoffs import (
    GaussianKnockoffs,
    knockoff_threshold,
    select_by_knockoffs,
    select_by_multiple_knockoffs,
)


def ar1(p: int, rho: float) -> np.ndarray:
    return rho ** np.abs(np.subtract.outer(np.arange(p), np.arange(p)))


@pytest.mark.parametrize("copies", [1, 2])
def test_knockoffs_have_the_closed_form_joint_covariance_on_gaussian_x(copies):
    # Σ = diag(σ) AR(1, 0.5) diag(σ); every block of (X, X̃¹, …) is Σ on the diagonal, Σ − S off it
    pytest.importorskip("knockpy")
    p, sd = 5, np.array([1.0, 2.0, 0.5, 1.0, 3.0])
    sigma = ar1(p, 0.5) * np.outer(sd, sd)
    mean = np.arange(p, dtype=float)
    knockoffs = GaussianKnockoffs.mvr(mean, sigma, copies=copies)
    blocks = copies + 1
    s = knockoffs.s
    expected = np.block([[sigma if i == j else sigma - s for j in range(blocks)] for i in range(blocks)])
    # a valid S: the joint covariance is one (positive semidefinite), and S is diagonal and non-zero
    assert np.linalg.eigvalsh(expected).min() > -1e-8
    np.testing.assert_allclose(s, np.diag(np.diag(s)), atol=1e-10)
    assert np.diag(s).min() > 0
    x = np.random.default_rng(0).multivariate_normal(mean, sigma, size=100_000)
    joint = np.hstack([x, knockoffs.sample(x, seed=1)])
    assert joint.shape == (100_000, blocks * p)
    np.testing.assert_allclose(joint.mean(axis=0), np.tile(mean, blocks), atol=0.05)
    # Monte-Carlo error of a correlation-scale covariance of 1e5 rows: about 3 / sqrt(1e5) < 0.02
    scale = np.outer(np.tile(sd, blocks), np.tile(sd, blocks))
    np.testing.assert_allclose(np.cov(joint.T) / scale, expected / scale, atol=0.02)
    np.testing.assert_allclose(knockoffs.joint_covariance(), expected)


@pytest.mark.parametrize("copies", [1, 2])
def test_independent_inputs_get_independent_copies(copies):
    # Σ = I: MVR's S is I itself (a copy independent of its input), scaled to (κ + 1)/(2κ) for κ copies
    pytest.importorskip("knockpy")
    knockoffs = GaussianKnockoffs.mvr(np.zeros(4), np.eye(4), copies=copies)
    np.testing.assert_allclose(knockoffs.s, (copies + 1) / (2 * copies) * np.eye(4), atol=1e-3)
    x = np.random.default_rng(1).standard_normal((20_000, 4))
    cross = np.cov(np.hstack([x, knockoffs.sample(x)]).T)[:4, 4:8]  # Σ − S: 0 for one copy, I/4 for two
    np.testing.assert_allclose(cross, (1 - (copies + 1) / (2 * copies)) * np.eye(4), atol=0.05)


def test_group_knockoffs_swap_a_group_together():
    # two near-duplicate inputs (ρ = 0.95) as one group and a third alone: S is block-diagonal by group
    pytest.importorskip("knockpy")
    sigma = np.array([[1.0, 0.95, 0.3], [0.95, 1.0, 0.3], [0.3, 0.3, 1.0]])
    knockoffs = GaussianKnockoffs.mvr(np.zeros(3), sigma, [[0, 1], [2]])
    assert np.abs(knockoffs.s[:2, 2]).max() < 1e-8 and np.abs(knockoffs.s[0, 1]) > 1e-3
    assert np.linalg.eigvalsh(knockoffs.joint_covariance()).min() > -1e-8
    # the group's copy is further from it than the pair's per-input knockoffs can be (S₀₀ ≤ 2(1 − ρ) = 0.1)
    single = GaussianKnockoffs.mvr(np.zeros(3), sigma)
    assert np.diag(single.s)[:2].max() <= 0.1 + 1e-6 < np.diag(knockoffs.s)[:2].min()


def brute_force_selection(w, q, offset):
    """The selection at the smallest t of a grid of step ½ over (0, max|W|] (integer W: every |W_j| and
    every gap between them) whose ratio is at most q."""
    for t in np.arange(0.5, np.abs(w).max() + 0.5, 0.5):
        if (offset + np.sum(w <= -t)) / max(1, np.sum(w >= t)) <= q:
            return w >= t
    return np.zeros(len(w), dtype=bool)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("offset", [0, 1])
def test_threshold_selects_what_a_brute_force_scan_selects(seed, offset):
    rng = np.random.default_rng(seed)
    w = np.r_[rng.integers(5, 30, 8), rng.integers(-10, 11, 12)]  # ties and zeros included
    for q in (0.1, 0.2, 0.3):
        np.testing.assert_array_equal(select_by_knockoffs(w, q, offset=offset), brute_force_selection(w, q, offset))


def test_threshold_matches_a_hand_computation():
    w = np.array([5, 4, 3, -2, 1, -0.5, 0])
    # t = 3: knockoff+ (1 + 0) / 3; t = 1: knockoff (0 + 1) / 4
    assert knockoff_threshold(w, 0.34) == 3
    assert select_by_knockoffs(w, 0.34).tolist() == [True, True, True, False, False, False, False]
    assert knockoff_threshold(w, 0.25, offset=0) == 1
    assert knockoff_threshold(w, 0.3) == float("inf")  # knockoff+ needs at least 1/q = 3.3 selections
    assert not select_by_knockoffs(w, 0.3).any()
    with pytest.raises(ValueError, match="q must"):
        knockoff_threshold(w, 0.0)


def test_knockoff_plus_controls_the_false_discovery_rate_when_null_signs_are_coin_flips():
    # The guarantee's premise (Candès et al. 2018, Lemma 3.2): the signs of the null W_j are i.i.d. fair coins.
    rng = np.random.default_rng(0)
    proportions, power = [], []
    for _ in range(400):
        w = np.r_[rng.uniform(0.5, 3, 20), rng.uniform(0, 1, 30) * rng.choice([-1, 1], 30)]
        selected = select_by_knockoffs(w, 0.1)
        proportions.append(selected[20:].sum() / max(1, selected.sum()))
        power.append(selected[:20].mean())
    assert np.mean(proportions) <= 0.1 + 3 * np.std(proportions) / np.sqrt(400)
    assert np.mean(power) > 0.8


@pytest.mark.parametrize("seed", range(4))
def test_one_copy_of_multiple_knockoffs_is_knockoff_plus(seed):
    rng = np.random.default_rng(seed)
    importance = rng.integers(0, 12, size=(2, 20)).astype(float)
    importance[0, :6] += 10
    for q in (0.1, 0.2, 0.3):
        np.testing.assert_array_equal(
            select_by_multiple_knockoffs(importance, q), select_by_knockoffs(importance[0] - importance[1], q)
        )


def test_multiple_knockoffs_match_a_hand_computation():
    # κ = 2: leaders 0, 0, 0, 0, 0, 1; leads (largest minus median of the other two) 9.5, 8.5, ..., 5.5, 4.5
    importance = np.array([[10, 9, 8, 7, 6, 1], [1, 1, 1, 1, 1, 5], [0, 0, 0, 0, 0, 0]], dtype=float)
    # t = 4.5: (1 + 1) / (2·5) = 0.2; t = 5.5: (1 + 0) / (2·5) = 0.1
    assert select_by_multiple_knockoffs(importance, 0.1).tolist() == [True] * 5 + [False]
    assert select_by_multiple_knockoffs(importance, 0.09).tolist() == [False] * 6  # t = 6.5: 1 / (2·4) > 0.09
    assert not select_by_knockoffs(importance[0] - importance[1], 0.1).any()  # knockoff+ needs 10 selections


def test_two_copies_control_the_false_discovery_rate_and_select_five_of_twenty_at_q_one_tenth():
    # Null inputs' importance is exchangeable with their copies'; 5 relevant inputs lead by far.
    rng = np.random.default_rng(0)
    proportions, power = [], []
    for _ in range(400):
        importance = rng.random((3, 20))
        importance[0, :5] += 10
        selected = select_by_multiple_knockoffs(importance, 0.1)
        proportions.append(selected[5:].sum() / max(1, selected.sum()))
        power.append(selected[:5].mean())
    assert np.mean(proportions) <= 0.1 + 3 * np.std(proportions) / np.sqrt(400)
    assert np.mean(power) == 1.0
