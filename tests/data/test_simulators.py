"""The sparse non-linear simulation of Liang, Li and Song (2018) against its definition, by Monte Carlo."""

import numpy as np
import pytest

from bayesprune.core.errors import DataError
from bayesprune.data.simulators import sparse_nonlinear_regression


def test_sparse_nonlinear_regression_is_its_formula_plus_noise_on_equicorrelated_inputs():
    x, y, relevant = sparse_nonlinear_regression(20000, 20, noise=0.5, seed=3)
    assert x.shape == (20000, 20) and relevant.tolist() == [True] * 5 + [False] * 15
    signal = 10 * x[:, 1] / (1 + x[:, 0] ** 2) + 5 * np.sin(x[:, 2] * x[:, 3]) + 2 * x[:, 4]
    residual = y - signal
    assert abs(residual.std() - 0.5) < 0.01 and abs(residual.mean()) < 0.02  # N(0, 0.5²) noise, se ≈ 0.0035
    assert np.corrcoef(residual, x[:, 5:].T)[0, 1:].max() < 0.04  # the noise inputs do not enter y
    covariance = np.cov(x.T)  # x_j = (e + z_j)/2: variance 1/2, covariance 1/4
    assert np.allclose(np.diag(covariance), 0.5, atol=0.02)
    assert np.allclose(covariance[~np.eye(20, dtype=bool)], 0.25, atol=0.025)
    again = sparse_nonlinear_regression(20000, 20, noise=0.5, seed=3)
    assert np.array_equal(again[0], x) and np.array_equal(again[1], y)


def test_sparse_nonlinear_regression_needs_the_five_relevant_inputs():
    with pytest.raises(DataError, match="num_features"):
        sparse_nonlinear_regression(10, 4)
