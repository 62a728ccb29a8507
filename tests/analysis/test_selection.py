"""Feature selection BNN_VS (paper 003, Algorithm 2 and the cross-validated threshold of section 4.1)."""

import numpy as np
import pyro
import pytest
import torch

from bayesprune.analysis.importance import scaled_importance
from bayesprune.analysis.selection import (
    CrossValidatedSelection,
    additive_spline_fit_predict,
    fold_indices,
    hinge_basis,
    least_squares_fit_predict,
    mask_features,
    select_by_cross_validation,
    select_by_quantile,
    selection_accuracy,
)
from bayesprune.experiments.common import sbnn_fit_predict, simulation_config


@pytest.mark.parametrize("num_features", [10, 100, 37])
def test_quantile_selection_keeps_the_top_fifth(num_features):
    phi = torch.rand(num_features, generator=torch.Generator().manual_seed(num_features))
    selected = select_by_quantile(phi, 0.8)
    kept = int(selected.sum())
    top = phi.argsort(descending=True)[:kept]
    assert set(top.tolist()) == set(torch.nonzero(selected).flatten().tolist())
    # r interpolates between order statistics 0.8(D-1) and the next: D - ceil(0.8(D-1)) survive
    assert kept == {10: 2, 100: 20, 37: 8}[num_features]


def test_selection_accuracy_matches_a_hand_count():
    selected = torch.tensor([True, True, False, False, True, False])
    truth = torch.tensor([True, False, False, True, True, False])
    assert selection_accuracy(selected, truth) == pytest.approx(4 / 6)  # agree at 0, 2, 4, 5


def test_mask_features_is_x_times_diag_w():
    x = torch.arange(12.0).reshape(3, 4)
    selected = torch.tensor([True, False, True, False])
    torch.testing.assert_close(mask_features(x, selected), x @ torch.diag(selected.float()))
    images = torch.ones(2, 3, 4, 4)
    masked = mask_features(images, torch.tensor([False, True, False]))
    assert masked[:, 1].eq(1).all() and masked[:, [0, 2]].eq(0).all()


def test_folds_partition_the_rows():
    folds = fold_indices(23, 5, seed=1)
    assert len(folds) == 5 and sorted(torch.cat(folds).tolist()) == list(range(23))
    with pytest.raises(ValueError):
        fold_indices(5, 1)


def test_least_squares_matches_numpy_and_ignores_zeroed_features():
    generator = torch.Generator().manual_seed(0)
    x, y = (
        torch.randn(80, 4, generator=generator, dtype=torch.float64),
        torch.randn(80, generator=generator, dtype=torch.float64),
    )
    design = np.hstack([x[:60].numpy(), np.ones((60, 1))])
    coefficients = np.linalg.lstsq(design, y[:60].numpy(), rcond=None)[0]
    expected = np.hstack([x[60:].numpy(), np.ones((20, 1))]) @ coefficients
    np.testing.assert_allclose(least_squares_fit_predict(x[:60], y[:60], x[60:]).numpy(), expected, rtol=1e-6)
    masked = mask_features(x, torch.tensor([True, False, True, True]))
    torch.testing.assert_close(
        least_squares_fit_predict(masked[:60], y[:60], masked[60:]),
        least_squares_fit_predict(x[:60, [0, 2, 3]], y[:60], x[60:, [0, 2, 3]]),
    )


def test_hinge_basis_is_x_and_its_ramps_at_the_knots():
    x = torch.tensor([[-1.0, 2.0], [0.5, 0.0]])
    knots = torch.tensor([[0.0, 1.0]])
    expected = [[-1.0, 2.0, 0.0, 1.0], [0.5, 0.0, 0.5, 0.0]]
    assert hinge_basis(x, knots).tolist() == expected


def test_additive_spline_is_exact_on_a_broken_line_with_its_knot_at_the_median():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(501, 3, generator=generator, dtype=torch.float64)
    median = x[:401].median(dim=0).values  # odd row count: torch's median is the 0.5 quantile
    y = (x - median).abs() @ torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64) + 0.5
    prediction = additive_spline_fit_predict(x[:401], y[:401], x[401:], knots=1)
    torch.testing.assert_close(prediction, y[401:], atol=1e-5, rtol=0)
    linear_mse = (least_squares_fit_predict(x[:401], y[:401], x[401:]) - y[401:]).pow(2).mean()
    assert linear_mse > 1.0  # the linear model cannot bend: the spline's exactness is not trivial
    masked = mask_features(x, torch.tensor([True, False, True]))
    torch.testing.assert_close(
        additive_spline_fit_predict(masked[:401], y[:401], masked[401:], knots=1),
        additive_spline_fit_predict(x[:401, [0, 2]], y[:401], x[401:, [0, 2]], knots=1),
    )


def sparse_linear_problem(n=600, num_features=20, num_active=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, num_features, generator=generator, dtype=torch.float64)
    truth = torch.zeros(num_features, dtype=torch.bool)
    truth[torch.randperm(num_features, generator=generator)[:num_active]] = True
    beta = torch.where(truth, torch.linspace(0.5, 1.5, num_features, dtype=torch.float64), 0.0)
    y = x @ beta + torch.randn(n, generator=generator, dtype=torch.float64)
    return x, y, truth


def ols_importance(x, y):
    """φ from the absolute least-squares coefficients, a stand-in for the sBNN's ψ."""
    return scaled_importance(torch.linalg.lstsq(x, y.unsqueeze(1)).solution.squeeze(1).abs())


@pytest.mark.parametrize("seed", [0, 3])
def test_cross_validated_threshold_recovers_the_active_set(seed):
    x, y, truth = sparse_linear_problem(seed=seed)
    result = select_by_cross_validation(
        x, y, ols_importance(x, y), fit_predict=least_squares_fit_predict, folds=10, one_standard_error=True
    )
    assert isinstance(result, CrossValidatedSelection)
    assert selection_accuracy(result.selected, truth) >= 0.9
    assert result.active_proportion == pytest.approx(result.selected.double().mean().item())
    assert result.selected.equal(ols_importance(x, y) >= result.threshold)


def test_minimum_rule_takes_the_lowest_error_and_one_standard_error_is_sparser():
    x, y, _ = sparse_linear_problem(seed=3)
    phi = ols_importance(x, y)
    minimum = select_by_cross_validation(x, y, phi, fit_predict=least_squares_fit_predict)
    assert len(minimum.thresholds) == len(minimum.cv_error) == len(minimum.cv_std_error) == 20
    best = minimum.cv_error.argmin()
    assert minimum.threshold == minimum.thresholds[best]
    sparse = select_by_cross_validation(x, y, phi, fit_predict=least_squares_fit_predict, one_standard_error=True)
    assert sparse.threshold >= minimum.threshold
    assert sparse.cv_error[sparse.thresholds == sparse.threshold] <= minimum.cv_error[best] + minimum.cv_std_error[best]


def test_ties_go_to_the_sparser_model_and_identical_masks_are_fitted_once():
    calls = []

    def constant(x_train, y_train, x_test):
        calls.append(1)
        return torch.zeros(len(x_test))

    x, y = torch.randn(20, 3), torch.randn(20)
    phi = torch.tensor([0.0, 0.5, 1.0])
    result = select_by_cross_validation(x, y, phi, fit_predict=constant, folds=4, thresholds=[0.0, 0.2, 0.5, 0.9, 1.0])
    assert result.threshold == 1.0 and result.selected.tolist() == [False, False, True]
    assert len(calls) == 3 * 4  # 5 thresholds, 3 distinct masks: {2} (1.0, 0.9), {1, 2} (0.5, 0.2), {0, 1, 2} (0.0)


def test_sbnn_fit_predict_refits_the_network_on_a_fold():
    pyro.enable_validation(False)
    fit_predict = sbnn_fit_predict(simulation_config(train={"epochs": 2}))
    x, y = torch.randn(64, 3), torch.randn(64)
    prediction = fit_predict(x[:48], y[:48], x[48:])
    assert prediction.shape == (16,) and torch.isfinite(prediction).all()
    with pytest.raises(ValueError, match="regression"):
        fit_predict(x[:48], y[:48].long(), x[48:])


def test_benjamini_hochberg_keeps_what_scipys_adjusted_p_values_keep():
    from scipy.stats import false_discovery_control

    from bayesprune.analysis.selection import benjamini_hochberg

    assert benjamini_hochberg(torch.tensor([0.5, 0.01, 0.03, 0.02]), 0.1).tolist() == [False, True, True, True]
    generator = np.random.default_rng(0)
    for _ in range(50):
        p = np.concatenate([generator.uniform(size=15), generator.uniform(0, 0.02, size=5)])
        expected = false_discovery_control(p) <= 0.1
        assert benjamini_hochberg(torch.tensor(p), 0.1).numpy().tolist() == expected.tolist()


def null_simulations(count, inputs=20, relevant=0, shift=6.0, seed=0):
    """``count`` data sets of ``inputs`` independent N(δ, σ²) statistics, δ and σ drawn per set, the first
    ``relevant`` of them shifted by ``shift`` σ."""
    generator = torch.Generator().manual_seed(seed)
    centre, scale = torch.randn(count, 1, generator=generator) * 5, torch.rand(count, 1, generator=generator) + 0.1
    statistic = torch.randn(count, inputs, generator=generator, dtype=torch.float64)
    statistic[:, :relevant] += shift
    return centre + scale * statistic


def test_empirical_null_p_values_are_uniform_when_every_input_is_null():
    from bayesprune.analysis.selection import empirical_null_p_values

    p = torch.stack([empirical_null_p_values(statistic, seed=1) for statistic in null_simulations(400)])
    for level in (0.01, 0.05, 0.2, 0.5):  # Monte Carlo: 8000 p-values (correlated within a set)
        assert abs((p <= level).double().mean().item() - level) < 0.015 + 0.1 * level


def test_empirical_null_selection_controls_the_false_discovery_rate_on_simulated_nulls():
    from bayesprune.analysis.selection import select_by_empirical_null

    null = torch.stack([select_by_empirical_null(statistic, 0.1) for statistic in null_simulations(400)])
    assert null.any(dim=1).double().mean() < 0.13  # with no relevant input the FDR is P(anything selected)
    chosen = torch.stack([select_by_empirical_null(s, 0.1) for s in null_simulations(400, relevant=5, seed=1)])
    false_discoveries = chosen[:, 5:].sum(dim=1) / chosen.sum(dim=1).clamp(min=1)
    assert false_discoveries.mean() < 0.1 and chosen[:, :5].double().mean() > 0.85
    # the rule reads positions among the inputs: a positive affine map of the statistic selects the same
    statistic = null_simulations(1, relevant=5, seed=2)[0]
    assert torch.equal(select_by_empirical_null(3 * statistic - 7, 0.1), select_by_empirical_null(statistic, 0.1))
    assert not select_by_empirical_null(torch.tensor([1.0] * 15 + [2.0] * 5), 0.1).any()  # σ₀ = 0: no null to read


def test_inclusion_logit_is_the_empirical_logit():
    from bayesprune.analysis.selection import inclusion_logit

    logit = inclusion_logit(torch.tensor([0.0, 0.25, 1.0]), 400)
    torch.testing.assert_close(
        logit, torch.tensor([-np.log(801), np.log(100.5 / 300.5), np.log(801)], dtype=torch.float64)
    )


def test_stability_selection_keeps_what_enough_of_the_restarts_select():
    from bayesprune.analysis.selection import select_by_stability

    generator = torch.Generator().manual_seed(0)
    for threshold in (0.5, 0.75, 1.0):
        selections = torch.rand(4, 12, generator=generator) < 0.5
        counted = [sum(bool(selections[r, j]) for r in range(4)) for j in range(12)]  # by hand
        expected = [count >= threshold * 4 for count in counted]
        assert select_by_stability(selections, threshold).tolist() == expected
    with pytest.raises(ValueError, match="threshold"):
        select_by_stability(selections, 0.0)
