"""Simulated regression with known ground truth (paper 003, section 4.1)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from bayesprune.core.errors import DataError
from bayesprune.core.validation import MAX_ELEMENTS
from bayesprune.data.options import _boolean, _choice, _fraction, _integer, _real
from bayesprune.data.registry import Dataset, register_dataset
from bayesprune.data.tables import _feature_names, _regression_dataset

# Simulated regression (paper 003, section 4.1).


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def _wiggle(x: np.ndarray) -> np.ndarray:
    """The non-linear link of paper 003, Experiment 2: ``exp(|x|) - 2x + sin(2 pi x)``."""
    return np.exp(np.abs(x)) - 2.0 * x + np.sin(2.0 * np.pi * x)


_LINKS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"linear": _identity, "nonlinear": _wiggle}


def _simulated_dataset(
    name: str,
    x: np.ndarray,
    y: np.ndarray,
    rng: np.random.Generator,
    *,
    test_fraction: float,
    normalize: bool,
    extras: dict,
) -> Dataset:
    """Split simulated rows at random and build the regression dataset.

    Draws the split permutation from ``rng``; the test set holds ``round(n * test_fraction)`` rows.
    """
    n = x.shape[0]
    num_test = round(n * test_fraction)
    if not 0 < num_test < n:
        raise DataError(f"data.test_fraction={test_fraction!r} leaves an empty train or test set with data.n={n}")
    order = rng.permutation(n)
    train, test = order[num_test:], order[:num_test]
    return _regression_dataset(
        name,
        x[train],
        y[train],
        x[test],
        y[test],
        normalize=normalize,
        feature_names=_feature_names(x.shape[1]),
        extras=extras,
        export_inputs=f"as the simulator (data.dataset {name!r}) draws them, not data files",
    )


def _simulation_options(
    n, num_features, seed, test_fraction, noise, normalize
) -> tuple[int, int, np.random.Generator, float, float, bool]:
    """Check the options every simulator shares; return them with a generator seeded by ``seed``.

    ``n`` rows of ``num_features`` values above :data:`~bayesprune.core.validation.MAX_ELEMENTS` are refused
    before anything is drawn."""
    n, num_features = _integer("n", n, minimum=1), _integer("num_features", num_features, minimum=1)
    if n * num_features > MAX_ELEMENTS:
        raise DataError(
            f"data.n = {n:,} rows of {num_features:,} features are more than the {MAX_ELEMENTS:,} (2**31) "
            "values bayesprune simulates; make data.n or data.num_features smaller"
        )
    return (
        n,
        num_features,
        np.random.default_rng(_integer("seed", seed, minimum=0)),
        _fraction("test_fraction", test_fraction),
        _real("noise", noise, low=0.0),
        _boolean("normalize", normalize),
    )


def _effect_sizes(num_features: int, alpha: float) -> np.ndarray:
    """``beta_j = j / alpha`` for ``j = 1, ..., D`` (paper 003, Experiments 2 and 3, section 4.1)."""
    return np.arange(1, num_features + 1) / alpha


@register_dataset("linear-regression")
def load_linear_regression(
    *,
    n: int = 1000,
    num_features: int = 10,
    num_relevant: int = 2,
    coefficient: float = 2.0,
    noise: float = 1.0,
    test_fraction: float = 0.2,
    seed: int = 0,
    normalize: bool = True,
) -> Dataset:
    """Sparse linear regression: ``y = coefficient * sum_{j < num_relevant} x_j + noise * eps``.

    ``x`` and ``eps`` are iid standard normal. A check that relevant first-layer weights get
    inclusion probability near 1 and the others near 0.

    Args:
        n: Number of rows (train and test together).
        num_features: Number of features D.
        num_relevant: How many leading features enter the response, in ``[0, D]``.
        coefficient: Their common coefficient.
        noise: Standard deviation of the noise.
        test_fraction: Fraction of rows held out, in ``(0, 1)``.
        seed: Seed of the features, noise and split.
        normalize: Standardise features and target with training statistics.

    Returns:
        A regression :class:`Dataset` with ``extras["beta"]`` (float32 ``(D,)``, raw units) and
        ``extras["relevant"]`` (bool ``(D,)``).
    """
    n, num_features, rng, test_fraction, noise, normalize = _simulation_options(
        n, num_features, seed, test_fraction, noise, normalize
    )
    num_relevant = _integer("num_relevant", num_relevant, minimum=0)
    if num_relevant > num_features:
        raise DataError(f"data.num_relevant must be at most data.num_features={num_features}, got {num_relevant}")
    coefficient = _real("coefficient", coefficient)
    relevant = np.arange(num_features) < num_relevant
    beta = coefficient * relevant
    x = rng.standard_normal((n, num_features))
    y = x @ beta + noise * rng.standard_normal(n)
    extras = {"beta": torch.from_numpy(beta).float(), "relevant": torch.from_numpy(relevant)}
    return _simulated_dataset(
        "linear-regression", x, y, rng, test_fraction=test_fraction, normalize=normalize, extras=extras
    )


@register_dataset("feature-importance-2var")
def load_feature_importance_2var(
    *,
    n: int = 2000,
    alpha: float = 0.5,
    noise: float = 1.0,
    test_fraction: float = 0.2,
    seed: int = 0,
    normalize: bool = True,
) -> Dataset:
    """Two features of shifting importance (paper 003, Experiment 1, section 4.1).

    ``y = (1 - alpha) x_1 + alpha x_2 + noise * eps`` with ``x_1, x_2, eps`` iid standard normal.
    The actual relevance of ``x_2`` is ``I = 1 - sum (y - alpha x_2)^2 / sum y^2`` over the
    full sample, in raw units.

    Args:
        n: Number of rows (train and test together).
        alpha: Weight of the second feature, in ``[0, 1]``.
        noise: Standard deviation of the noise.
        test_fraction: Fraction of rows held out, in ``(0, 1)``.
        seed: Seed of the features, noise and split.
        normalize: Standardise features and target with training statistics.

    Returns:
        A regression :class:`Dataset` with ``extras["importance"]`` (the float ``I``) and
        ``extras["beta"]`` (float32 ``[1 - alpha, alpha]``).
    """
    n, _, rng, test_fraction, noise, normalize = _simulation_options(n, 2, seed, test_fraction, noise, normalize)
    alpha = _real("alpha", alpha, low=0.0, high=1.0)
    beta = np.array([1.0 - alpha, alpha])
    x = rng.standard_normal((n, 2))
    y = x @ beta + noise * rng.standard_normal(n)
    importance = 1.0 - np.sum((y - alpha * x[:, 1]) ** 2) / np.sum(y**2)
    extras = {"importance": float(importance), "beta": torch.from_numpy(beta).float()}
    return _simulated_dataset(
        "feature-importance-2var", x, y, rng, test_fraction=test_fraction, normalize=normalize, extras=extras
    )


@register_dataset("feature-importance-many")
def load_feature_importance_many(
    *,
    n: int = 2000,
    num_features: int = 10,
    alpha: float = 1.0,
    f: str = "linear",
    noise: float = 1.0,
    test_fraction: float = 0.2,
    seed: int = 0,
    normalize: bool = True,
) -> Dataset:
    """Many features of graded importance (paper 003, Experiment 2, section 4.1).

    ``y = sum_j f(x_j) beta_j + noise * eps`` with ``beta_j = j / alpha`` (``j = 1, ..., D``),
    ``x_j, eps`` iid standard normal and ``f(x) = x`` (``"linear"``) or
    ``f(x) = exp(|x|) - 2x + sin(2 pi x)`` (``"nonlinear"``).

    Args:
        n: Number of rows (train and test together).
        num_features: Number of features D.
        alpha: Inverse signal strength, ``> 0``.
        f: ``"linear"`` or ``"nonlinear"``.
        noise: Standard deviation of the noise.
        test_fraction: Fraction of rows held out, in ``(0, 1)``.
        seed: Seed of the features, noise and split.
        normalize: Standardise features and target with training statistics.

    Returns:
        A regression :class:`Dataset` with ``extras["beta"]`` (float32 ``(D,)``).
    """
    n, num_features, rng, test_fraction, noise, normalize = _simulation_options(
        n, num_features, seed, test_fraction, noise, normalize
    )
    beta = _effect_sizes(num_features, _real("alpha", alpha, low=0.0, open_low=True))
    link = _LINKS[_choice("f", f, tuple(_LINKS))]
    x = rng.standard_normal((n, num_features))
    y = link(x) @ beta + noise * rng.standard_normal(n)
    extras = {"beta": torch.from_numpy(beta).float()}
    return _simulated_dataset(
        "feature-importance-many", x, y, rng, test_fraction=test_fraction, normalize=normalize, extras=extras
    )


@register_dataset("feature-selection")
def load_feature_selection(
    *,
    n: int = 2000,
    num_features: int = 100,
    alpha: float = 2.0,
    pi: float = 0.2,
    f: str = "nonlinear",
    noise: float = 1.0,
    test_fraction: float = 0.2,
    seed: int = 0,
    normalize: bool = True,
) -> Dataset:
    """Sparse features for selection (paper 003, Experiment 3, eq. 4.1, section 4.1).

    ``y = sum_j f(x_j) beta_j Z_j + noise * eps`` with ``Z_j ~ Bernoulli(pi)``, ``beta_j = j / alpha``
    and ``f`` as in Experiment 2. The paper's defaults: n = 2000, 80% for training, D = 100,
    alpha = 2, pi = 0.2, the non-linear ``f``. ``Z`` is drawn first, so it depends on ``seed``
    and ``num_features`` only.

    Args:
        n: Number of rows (train and test together).
        num_features: Number of features D.
        alpha: Inverse signal strength, ``> 0``.
        pi: Probability that a feature is active, in ``[0, 1]``.
        f: ``"linear"`` or ``"nonlinear"``.
        noise: Standard deviation of the noise.
        test_fraction: Fraction of rows held out, in ``(0, 1)``.
        seed: Seed of the indicators, features, noise and split.
        normalize: Standardise features and target with training statistics.

    Returns:
        A regression :class:`Dataset` with ``extras["beta"]`` (float32 ``(D,)``, before masking)
        and ``extras["active"]`` (bool ``(D,)``, the ``Z_j``).
    """
    n, num_features, rng, test_fraction, noise, normalize = _simulation_options(
        n, num_features, seed, test_fraction, noise, normalize
    )
    beta = _effect_sizes(num_features, _real("alpha", alpha, low=0.0, open_low=True))
    pi = _real("pi", pi, low=0.0, high=1.0)
    link = _LINKS[_choice("f", f, tuple(_LINKS))]
    active = rng.random(num_features) < pi
    x = rng.standard_normal((n, num_features))
    y = link(x) @ (beta * active) + noise * rng.standard_normal(n)
    extras = {"beta": torch.from_numpy(beta).float(), "active": torch.from_numpy(active)}
    return _simulated_dataset(
        "feature-selection", x, y, rng, test_fraction=test_fraction, normalize=normalize, extras=extras
    )


def sparse_nonlinear_regression(
    n: int = 400, num_features: int = 20, *, noise: float = 1.0, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Five relevant inputs of ``num_features`` acting non-linearly, with an interaction: the simulation of
    Liang, Li and Song (2018, "Bayesian neural networks for selection of drug sensitive genes", JASA
    113(523), section 4.1), also used for sparse deep networks by Sun, Song and Liang (2022, "Consistent
    sparse deep learning: theory and computation", JASA 117(540), section 5.1):

    ``y = 10 x1 / (1 + x0²) + 5 sin(x2 x3) + 2 x4 + noise * eps``, ``x_j = (e + z_j) / 2``

    with ``e``, ``z_j`` and ``eps`` independent standard normals, so every pair of inputs has correlation
    1/2 (numbered from 0 here: the papers' x1, ..., x5 are x0, ..., x4). Raw rows, for benchmarks that
    compare selection rules on known truth (``benchmarks/importance_validation.py``).

    Returns:
        ``x`` ``(n, num_features)``, ``y`` ``(n,)`` and ``relevant`` (bool ``(num_features,)``, the first five).
    """
    n = _integer("n", n, minimum=1)
    num_features = _integer("num_features", num_features, minimum=5)
    rng = np.random.default_rng(_integer("seed", seed, minimum=0))
    x = (rng.standard_normal((n, 1)) + rng.standard_normal((n, num_features))) / 2
    y = 10 * x[:, 1] / (1 + x[:, 0] ** 2) + 5 * np.sin(x[:, 2] * x[:, 3]) + 2 * x[:, 4]
    y = y + _real("noise", noise, low=0.0) * rng.standard_normal(n)
    return x, y, np.arange(num_features) < 5
