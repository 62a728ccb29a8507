"""Model-X knockoffs: a selection of inputs with a frequentist false-discovery guarantee (Candès, Fan,
Janson and Lv 2018, "Panning for gold: model-X knockoffs for high dimensional controlled variable
selection", JRSS B 80(3)).

Every input X_j gets a knockoff copy X̃_j, built from X alone (never from y), such that swapping any
X_j with X̃_j leaves the joint law of (X, X̃) unchanged. A statistic W_j that flips sign when X_j and
X̃_j are swapped (here ψ_j − ψ̃_j of a network fitted on [X, X̃], paper 003's eq. 3.18) is then as likely
to be positive as negative for every irrelevant input, and the knockoff+ threshold (Barber and Candès
2015, eq. 1.9 of Candès et al.) bounds the expected false-discovery proportion by q.

Knockoff+ cannot select fewer than 1/q inputs (with q = 0.1 and 5 relevant inputs it selects
none); κ knockoff copies of every input (Roquero Gimenez and Zou 2019, "Improving the stability of the
knockoff procedure: multiple simultaneous knockoffs", AISTATS) lower that floor to 1/(κq), and
:func:`select_by_multiple_knockoffs` is their filter, knockoff+ itself for κ = 1.

The knockoffs here are second-order Gaussian knockoffs (Candès et al., section 3.1) whose S-matrix is
knockpy's minimum-variance-based-reconstructability choice (MVR; Spector and Janson 2022, "Powerful
knockoffs via minimizing reconstructability", Annals of Statistics 50(1)), which keeps more power than the
equicorrelated choice where inputs correlate, and which knockpy solves for groups of inputs too (group
knockoffs: a group's inputs swapped with its copies together, S block-diagonal by group). knockpy draws one
copy; κ copies (Roquero Gimenez and Zou 2019) need (κ + 1)/κ · S ⪯ Σ, which κ-copy S = (κ + 1)/(2κ) · S₁ meets
for any one-copy S₁ ⪯ 2Σ, so the one-copy MVR solution is scaled by (κ + 1)/(2κ) (exact for κ = 1; for
κ > 1 a valid S, not the κ-copy MVR optimum). X's mean and covariance are estimated from the rows given, the
covariance with Ledoit-Wolf shrinkage (scikit-learn), which stays invertible with fewer rows than a few
times the inputs. The guarantee is exact when X is Gaussian with the estimated moments and approximate
otherwise (second-order knockoffs match the first two moments only).
"""

from dataclasses import dataclass

import numpy as np

#: Knockoff copies of every input: knockoff+ with one copy selects nothing unless it can select 1/fdr
#: inputs at once (none of 5 relevant inputs at fdr 0.1); κ copies lower that floor to 1/(κ·fdr).
KNOCKOFF_COPIES = 2


def rows_needed(inputs: int, copies: int = KNOCKOFF_COPIES) -> int:
    """Training rows a knockoff selection needs: the fit on the inputs beside their copies has
    (copies + 1) · inputs inputs, and with fewer rows than that its design cannot tell them apart."""
    return (copies + 1) * inputs


def mvr_s_matrix(correlation, groups=None, *, copies: int = 1) -> np.ndarray:
    """knockpy's MVR S-matrix of a correlation matrix (block-diagonal by ``groups``, lists of input
    indices), scaled by (κ + 1)/(2κ) for κ ``copies`` (the module docstring)."""
    import warnings

    from knockpy.smatrix import compute_smatrix

    correlation = np.asarray(correlation, dtype=float)
    labels = None
    if groups is not None:
        labels = np.empty(len(correlation), dtype=int)
        for number, group in enumerate(groups, start=1):
            labels[group] = number
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # knockpy's notes on its optional solvers
        s = compute_smatrix(correlation, groups=labels, method="mvr")
    return (copies + 1) / (2 * copies) * (s + s.T) / 2


@dataclass(frozen=True)
class GaussianKnockoffs:
    """κ second-order Gaussian knockoff copies of inputs with ``mean`` and ``covariance``.

    (X, X̃¹, …, X̃^κ) is Gaussian with Σ in every diagonal block and Σ − S in every other block (Candès et
    al. 2018, eq. 3.2 for κ = 1), so that swapping X_j (or a group) with any of its copies leaves the law
    unchanged. Each copy given X is N(μ + (X − μ)(I − Σ⁻¹S), 2S − SΣ⁻¹S), two copies covarying by S − SΣ⁻¹S.

    Attributes:
        mean: μ, shape ``(p,)``.
        covariance: Σ, shape ``(p, p)``.
        s: S, shape ``(p, p)`` (diagonal, or block-diagonal by group).
        copies: κ.
    """

    mean: np.ndarray
    covariance: np.ndarray
    s: np.ndarray
    copies: int = 1

    @classmethod
    def mvr(cls, mean, covariance, groups=None, *, copies: int = 1) -> "GaussianKnockoffs":
        """S from knockpy's MVR on the correlation matrix of ``covariance`` (:func:`mvr_s_matrix`), on Σ's scale."""
        if copies < 1:
            raise ValueError(f"copies must be a positive integer, got {copies}")
        covariance = np.asarray(covariance, dtype=float)
        scale = np.sqrt(np.diag(covariance))
        s = mvr_s_matrix(covariance / np.outer(scale, scale), groups, copies=copies) * np.outer(scale, scale)
        return cls(np.asarray(mean, dtype=float), covariance, s, copies)

    @classmethod
    def fit(cls, x, groups=None, *, copies: int = 1) -> "GaussianKnockoffs":
        """MVR knockoffs of rows like ``x`` (``(n, p)``): its column means and Ledoit-Wolf covariance."""
        from sklearn.covariance import LedoitWolf

        x = np.asarray(x, dtype=float)
        if x.ndim != 2 or x.shape[0] < 2:
            raise ValueError(f"knockoffs need a table of at least 2 rows, got shape {x.shape}")
        return cls.mvr(x.mean(axis=0), LedoitWolf().fit(x).covariance_, groups, copies=copies)

    def joint_covariance(self) -> np.ndarray:
        """The covariance of (X, X̃¹, …, X̃^κ): Σ on the diagonal blocks, Σ − S elsewhere."""
        blocks = self.copies + 1
        return np.kron(np.ones((blocks, blocks)), self.covariance - self.s) + np.kron(np.eye(blocks), self.s)

    def sample(self, x, *, seed: int = 0) -> np.ndarray:
        """The κ copies [X̃¹, …, X̃^κ] of every row of ``x`` (``(n, p)`` → ``(n, κp)``), drawn given X with
        generator ``seed``."""
        x = np.asarray(x, dtype=float)
        solved = np.linalg.solve(self.covariance, self.s)  # Σ⁻¹S
        conditional_mean = self.mean + (x - self.mean) @ (np.eye(len(self.s)) - solved)
        shared = self.s - self.s @ solved  # S − SΣ⁻¹S
        blocks = np.eye(self.copies)
        conditional_covariance = np.kron(blocks, self.s) + np.kron(np.ones_like(blocks), shared)
        values, vectors = np.linalg.eigh((conditional_covariance + conditional_covariance.T) / 2)
        root = vectors * np.sqrt(np.clip(values, 0, None))
        noise = np.random.default_rng(seed).standard_normal((len(x), self.copies * len(self.s)))
        return np.tile(conditional_mean, self.copies) + noise @ root.T


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


def select_by_multiple_knockoffs(importance, q: float) -> np.ndarray:
    """The multiple-knockoff+ filter of Roquero Gimenez and Zou (2019) on the importance of every input
    and of its κ copies; with κ = 1 it is knockoff+ on W = importance − copy's importance.

    For input j, κ_j is which of its κ + 1 versions is most important (0: the input itself) and
    τ_j = T_(0) − median(T_(1), …, T_(κ)) the lead of the most important over the median of the rest.
    The inputs with κ_j = 0 and τ_j ≥ T are selected, T the smallest τ with
    (1 + #{κ_j ≠ 0, τ_j ≥ T}) / (κ · #{κ_j = 0, τ_j ≥ T}) ≤ q; the expected false-discovery proportion
    is at most q.

    Args:
        importance: ``(κ + 1, p)``: row 0 the inputs' importance, row k that of their k-th copies.
        q: the level, in (0, 1).

    Returns:
        Boolean mask of the selected inputs.
    """
    if not 0 < q < 1:
        raise ValueError(f"q must lie in (0, 1), got {q}")
    importance = np.asarray(importance, dtype=float)
    if importance.ndim != 2 or importance.shape[0] < 2:
        raise ValueError(f"importance must have shape (copies + 1, inputs), got {importance.shape}")
    copies = importance.shape[0] - 1
    leader = np.argmax(importance, axis=0)
    ordered = -np.sort(-importance, axis=0)
    lead = ordered[0] - np.median(ordered[1:], axis=0)
    for t in np.unique(lead[lead > 0]):  # ascending: the first that qualifies is the minimum
        if (1 + np.sum((leader != 0) & (lead >= t))) / copies / max(1, np.sum((leader == 0) & (lead >= t))) <= q:
            return (leader == 0) & (lead >= t)
    return np.zeros(importance.shape[1], dtype=bool)
