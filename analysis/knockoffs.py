"""Model-X knockoffs: a selection of inputs with a frequentist false-discovery guarantee (Candès, Fan,
Janson and Lv 2018, "Panning for gold: model-X knockoffs for high dimensional controlled variable
selection", JRSS B 80(3)).

Every input X_j gets a knockoff copy X̃_j, built from X alone (never from y), such that swapping any
X_j with X̃_j leaves the joint law of (X, X̃) unchanged. A statistic W_j that flips sign when X_j and
X̃_j are swapped (here ψ_j − ψ̃_j of a network fitted on [X, X̃], paper 003's eq. 3.18) is then as likely
to be positive as negative for every irrelevant input, and the knockoff+ threshold (Barber and Candès
2015, eq. 1.9 of Candès et al.) bounds the expected false-discovery proportion by q.

The knockoffs here are second-order Gaussian knockoffs (Candès et al., section 3.1) with the
equicorrelated choice of s (their eq. 3.4), which needs no semidefinite program: on the
correlation scale s_j = min(1, 2 λ_min(R)). X's mean and covariance are estimated from the rows given,
the covariance with Ledoit-Wolf shrinkage (scikit-learn), which stays invertible with fewer rows
than a few times the inputs. The guarantee is exact when X is Gaussian with the estimated moments and
approximate otherwise (second-order knockoffs match the first two moments only).
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GaussianKnockoffs:
    """Second-order equicorrelated Gaussian knockoffs of inputs with ``mean`` and ``covariance``.

    X̃ | X ~ N(μ + (X − μ)(I − Σ⁻¹D), 2D − DΣ⁻¹D) with D = diag(s), so that (X, X̃) has covariance
    [[Σ, Σ − D], [Σ − D, Σ]] (Candès et al. 2018, eq. 3.2-3.3).

    Attributes:
        mean: μ, shape ``(p,)``.
        covariance: Σ, shape ``(p, p)``.
        s: the diagonal of D, shape ``(p,)``.
    """

    mean: np.ndarray
    covariance: np.ndarray
    s: np.ndarray

    @classmethod
    def equicorrelated(cls, mean, covariance) -> "GaussianKnockoffs":
        """s_j = min(1, 2 λ_min(R)) σ_j² with R the correlation matrix of ``covariance`` (eq. 3.4)."""
        covariance = np.asarray(covariance, dtype=float)
        scale = np.sqrt(np.diag(covariance))
        correlation = covariance / np.outer(scale, scale)
        # 2 λ_min exactly makes the joint covariance singular; a hair less keeps X̃ a random variable.
        fraction = min(1.0, 2 * np.linalg.eigvalsh(correlation)[0] * (1 - 1e-6))
        return cls(np.asarray(mean, dtype=float), covariance, fraction * scale**2)

    @classmethod
    def fit(cls, x) -> "GaussianKnockoffs":
        """Equicorrelated knockoffs of rows like ``x`` (``(n, p)``): its column means and Ledoit-Wolf covariance."""
        from sklearn.covariance import LedoitWolf

        x = np.asarray(x, dtype=float)
        if x.ndim != 2 or x.shape[0] < 2:
            raise ValueError(f"knockoffs need a table of at least 2 rows, got shape {x.shape}")
        return cls.equicorrelated(x.mean(axis=0), LedoitWolf().fit(x).covariance_)

    def joint_covariance(self) -> np.ndarray:
        """The covariance of (X, X̃): [[Σ, Σ − D], [Σ − D, Σ]]."""
        off = self.covariance - np.diag(self.s)
        return np.block([[self.covariance, off], [off, self.covariance]])

    def sample(self, x, *, seed: int = 0) -> np.ndarray:
        """A knockoff copy X̃ of every row of ``x`` (``(n, p)``), drawn from X̃ | X with generator ``seed``."""
        x = np.asarray(x, dtype=float)
        solved = np.linalg.solve(self.covariance, np.diag(self.s))  # Σ⁻¹D
        conditional_mean = self.mean + (x - self.mean) @ (np.eye(len(self.s)) - solved)
        conditional_covariance = 2 * np.diag(self.s) - np.diag(self.s) @ solved
        values, vectors = np.linalg.eigh((conditional_covariance + conditional_covariance.T) / 2)
        root = vectors * np.sqrt(np.clip(values, 0, None))
        noise = np.random.default_rng(seed).standard_normal(x.shape)
        return conditional_mean + noise @ root.T


def knockoff_threshold(w, q: float, *, offset: int = 1) -> float:
    """The knockoff(+) threshold T = min{t > 0 : (offset + #{j : W_j ≤ −t}) / max(1, #{j : W_j ≥ t}) ≤ q}
    (Candès et al. 2018, eq. 3.7 with offset 0, knockoff+ with offset 1), over t in {|W_j|} \\ {0};
    ``inf`` (nothing selected) when no t qualifies.

    With offset 1 the expected false-discovery proportion of {j : W_j ≥ T} is at most q (their
    Theorem 3.4), which makes knockoff+ select nothing unless it can select at least 1/q inputs at once.
    Offset 0 bounds a modified FDR, E[V / (R + 1/q)], and selects smaller sets.
    """
    if not 0 < q < 1:
        raise ValueError(f"q must lie in (0, 1), got {q}")
    if offset not in (0, 1):
        raise ValueError(f"offset must be 0 (knockoff) or 1 (knockoff+), got {offset}")
    w = np.asarray(w, dtype=float)
    for t in np.unique(np.abs(w[w != 0])):  # ascending: the first that qualifies is the minimum
        if (offset + np.sum(w <= -t)) / max(1, np.sum(w >= t)) <= q:
            return float(t)
    return float("inf")


def select_by_knockoffs(w, q: float, *, offset: int = 1) -> np.ndarray:
    """Boolean mask {j : W_j ≥ T} of :func:`knockoff_threshold`."""
    return np.asarray(w, dtype=float) >= knockoff_threshold(w, q, offset=offset)
