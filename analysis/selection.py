"""Feature selection from the scaled importance φ: BNN_VS (paper 003, Algorithm 2, section 4.1).

Algorithm 2 keeps feature j when φ_j ≥ r (Ẑ_j = 1[φ_j ≥ r]) and refits the network on
X·diag(Ẑ). The threshold r is either fixed, the 80th percentile of φ (:func:`select_by_quantile`),
or chosen by 10-fold cross-validation (:func:`select_by_cross_validation`, the paper's "Cross
Validation for Finding Optimal Threshold"): φ comes from one fit on all the training data, and
every candidate threshold is scored by the cross-validated error of refitting on the features it
keeps.

Refitting is a pluggable ``fit_predict(x_train, y_train, x_test) -> y_pred``:
:func:`least_squares_fit_predict` is the linear-model baseline (LM) and
:func:`additive_spline_fit_predict` an additive regression spline, both fast stand-ins. The
paper's choice, refitting the sBNN, is :func:`bayesprune.experiments.common.sbnn_fit_predict`:
this module reads posteriors and never fits one.
"""

import functools
from dataclasses import dataclass

import torch


def select_by_quantile(phi: torch.Tensor, quantile: float = 0.8) -> torch.Tensor:
    """Ẑ_j = 1[φ_j ≥ r] with r the ``quantile`` of φ (Algorithm 2, lines 3–4; the paper uses 0.8).

    r is interpolated linearly between order statistics (``torch.quantile``), so with distinct
    values and quantile 0.8 the top 20% of D features are kept whenever 0.8·(D − 1) is not an integer.

    Returns:
        Boolean mask of the selected features.
    """
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must lie in [0, 1], got {quantile}")
    return phi.double() >= torch.quantile(phi.double(), quantile)


def mask_features(x: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
    """X·diag(W) of Algorithm 2, line 9: unselected features are set to zero, the shape is kept.

    ``selected`` indexes dimension 1 of ``x`` (tabular features, or the channels of ``(N, C, H, W)``
    images, matching a convolution-first network's per-channel importance).
    """
    weights = selected.to(dtype=x.dtype, device=x.device)
    return x * weights.reshape(weights.shape + (1,) * (x.dim() - 2))


def selection_accuracy(selected: torch.Tensor, truth: torch.Tensor) -> float:
    """Acc. = (1/D) Σ_j 1[Z_j = Ẑ_j] (section 4.1, Experiment 3)."""
    if selected.shape != truth.shape:
        raise ValueError(f"selected has shape {tuple(selected.shape)}, truth {tuple(truth.shape)}")
    return (selected.bool() == truth.bool()).double().mean().item()


def mean_squared_error(prediction: torch.Tensor, target: torch.Tensor) -> float:
    """Mean squared error, the default cross-validation loss."""
    return (prediction.reshape(target.shape).double() - target.double()).pow(2).mean().item()


def _least_squares(design_train, y_train, design_test):
    """Least squares with an intercept on design matrices; columns that are zero in every training row
    (unselected features) are dropped.

    Solved by the normal equations with a ridge of 1e-8 of their mean diagonal, which keeps repeated
    columns solvable and is about 3x faster than an SVD solve, the cost that matters inside
    cross-validation.
    """
    keep = design_train.abs().amax(dim=0) > 0

    def design(x):
        x = x[:, keep].double()
        return torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype)], dim=1)

    train = design(design_train)
    gram = train.T @ train
    gram.diagonal().add_(1e-8 * gram.diagonal().mean())
    coefficients = torch.cholesky_solve((train.T @ y_train.double()).unsqueeze(-1), torch.linalg.cholesky(gram))
    return (design(design_test) @ coefficients).squeeze(-1).to(y_train.dtype)


def least_squares_fit_predict(x_train, y_train, x_test):
    """Ordinary least squares with an intercept: the linear-model baseline (LM)."""
    return _least_squares(x_train.reshape(len(x_train), -1), y_train, x_test.reshape(len(x_test), -1))


def hinge_basis(x, knots):
    """Piecewise-linear spline basis of every column: [x_j, (x_j − k_1j)₊, …, (x_j − k_Kj)₊]_j.

    Args:
        x: ``(N, D)`` inputs.
        knots: ``(K, D)`` knot positions per column.

    Returns:
        ``(N, D·(K + 1))`` basis.
    """
    x = x.double()
    return torch.cat([x] + [torch.relu(x - knot) for knot in knots.double()], dim=1)


def additive_spline_fit_predict(x_train, y_train, x_test, *, knots: int = 5):
    """Additive regression spline y ≈ c + Σ_j s_j(x_j), each s_j piecewise linear, fitted by least squares.

    s_j has ``knots`` knots at the 1/(knots + 1), …, knots/(knots + 1) quantiles of the training x_j
    (:func:`hinge_basis`). A fast non-linear refit for :func:`select_by_cross_validation` on tabular
    data: it fits non-linear effects the linear model misses, at a cost of milliseconds per fold.
    """
    x_train, x_test = x_train.reshape(len(x_train), -1), x_test.reshape(len(x_test), -1)
    levels = torch.arange(1, knots + 1, dtype=torch.float64) / (knots + 1)
    positions = torch.quantile(x_train.double(), levels, dim=0)
    return _least_squares(hinge_basis(x_train, positions), y_train, hinge_basis(x_test, positions))


@dataclass(frozen=True)
class CrossValidatedSelection:
    """Outcome of :func:`select_by_cross_validation`.

    Attributes:
        threshold: the chosen threshold r on φ.
        selected: boolean mask Ẑ = 1[φ ≥ r].
        thresholds: the candidate thresholds, in decreasing order.
        cv_error: mean cross-validated loss of each candidate.
        cv_std_error: standard error of that mean over the folds.
    """

    threshold: float
    selected: torch.Tensor
    thresholds: torch.Tensor
    cv_error: torch.Tensor
    cv_std_error: torch.Tensor

    @property
    def active_proportion(self) -> float:
        """Fraction of the features kept, the paper's detected proportion of active features (Figure 7a)."""
        return self.selected.double().mean().item()


def fold_indices(n: int, folds: int, *, seed: int = 0) -> list:
    """Test rows of each of ``folds`` random, disjoint folds covering ``range(n)``."""
    if not 2 <= folds <= n:
        raise ValueError(f"folds must lie in [2, {n}], got {folds}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return list(torch.tensor_split(order, folds))


def cross_validation_error(x, y, fit_predict, test_folds, *, loss=mean_squared_error) -> torch.Tensor:
    """The loss of ``fit_predict`` on each held-out fold, trained on the other folds."""
    errors = []
    for test in test_folds:
        train = torch.ones(len(x), dtype=torch.bool)
        train[test] = False
        errors.append(loss(fit_predict(x[train], y[train], x[test]), y[test]))
    return torch.tensor(errors, dtype=torch.float64)


def _choose(thresholds, mean, std_error, one_standard_error: bool) -> int:
    """Index of the chosen threshold: the largest one within the tolerance of the lowest mean error."""
    best = int(torch.argmin(mean))
    tolerance = std_error[best] if one_standard_error else 0.0
    eligible = torch.nonzero(mean <= mean[best] + tolerance).flatten()
    return int(eligible[torch.argmax(thresholds[eligible])])


def select_by_cross_validation(
    x,
    y,
    phi,
    *,
    fit_predict,
    folds: int = 10,
    thresholds=None,
    one_standard_error: bool = False,
    loss=mean_squared_error,
    seed: int = 0,
) -> CrossValidatedSelection:
    """Choose the threshold on φ by k-fold cross-validation of BNN_VS (paper 003, section 4.1).

    Each candidate threshold t keeps the features with φ_j ≥ t; ``fit_predict`` is refitted on
    X·diag(Ẑ) (:func:`mask_features`) in every fold, and the candidate with the lowest mean held-out
    loss wins, ties going to the larger threshold (the sparser model). Candidates that keep the same
    features are fitted once.

    Args:
        x, y: training inputs (features along dimension 1) and targets.
        phi: scaled importance φ (eq. 3.19) of the features, from a fit on all of ``x``.
        fit_predict: ``fit_predict(x_train, y_train, x_test) -> y_pred``, e.g.
            :func:`least_squares_fit_predict` or :func:`bayesprune.experiments.common.sbnn_fit_predict`.
        folds: number of folds (the paper uses 10).
        thresholds: candidate thresholds; defaults to every distinct value of φ, i.e. every nested
            top-k set (D candidates — pass a coarser grid, e.g. ``torch.linspace(0, 1, 21)``,
            with an expensive ``fit_predict``).
        one_standard_error: take the largest threshold whose mean error is within one standard
            error of the minimum instead of the minimum itself (a sparser, more stable choice).
        loss: ``loss(prediction, target) -> float``; mean squared error by default.
        seed: seed of the fold assignment.

    Returns:
        A :class:`CrossValidatedSelection`.
    """
    candidates = torch.unique(phi if thresholds is None else torch.as_tensor(thresholds, dtype=phi.dtype))
    candidates = candidates.flip(0).double()
    test_folds = fold_indices(len(x), folds, seed=seed)
    errors, cache = [], {}
    for threshold in candidates:
        selected = phi.double() >= threshold
        key = tuple(selected.tolist())
        if key not in cache:
            cache[key] = cross_validation_error(mask_features(x, selected), y, fit_predict, test_folds, loss=loss)
        errors.append(cache[key])
    errors = torch.stack(errors)
    mean, std_error = errors.mean(dim=1), errors.std(dim=1) / folds**0.5
    chosen = _choose(candidates, mean, std_error, one_standard_error)
    return CrossValidatedSelection(
        threshold=candidates[chosen].item(),
        selected=phi.double() >= candidates[chosen],
        thresholds=candidates,
        cv_error=mean,
        cv_std_error=std_error,
    )


#: Default bound on the posterior expected false-discovery rate of :func:`select_by_bayesian_fdr`.
DEFAULT_FDR = 0.1


def expected_false_discovery_rate(inclusion: torch.Tensor, selected: torch.Tensor) -> float:
    """Posterior expected FDR of a selection: the mean of 1 − PIP_j over the selected inputs (0 for none).

    Given the data, input j is a false discovery with probability 1 − PIP_j, so the expected number
    of false discoveries is Σ_{j selected} (1 − PIP_j) (Müller, Parmigiani, Robert and Rousseau 2004;
    Newton, Noueiry, Sarkar and Ahlquist 2004).
    """
    count = int(selected.sum())
    return 0.0 if count == 0 else float((1 - inclusion.double()[selected.bool()]).sum()) / count


def select_by_bayesian_fdr(inclusion: torch.Tensor, fdr: float = DEFAULT_FDR) -> torch.Tensor:
    """The largest selection whose posterior expected false-discovery rate is at most ``fdr``.

    For any size k the selection with the lowest expected FDR is the k inputs of highest posterior
    inclusion probability (PIP), and the expected FDR of the top k grows with k, so the rule keeps
    the top k for the largest k with mean(1 − PIP of the top k) ≤ ``fdr``. Ties in PIP are kept or
    dropped together, so that the list does not depend on input order.

    Args:
        inclusion: posterior inclusion probability of every input, in [0, 1].
        fdr: the bound, in [0, 1).

    Returns:
        Boolean mask of the selected inputs.
    """
    if not 0.0 <= fdr < 1.0:
        raise ValueError(f"fdr must lie in [0, 1), got {fdr}")
    inclusion = inclusion.double()
    selected = torch.zeros_like(inclusion, dtype=torch.bool)
    for level in torch.unique(inclusion).flip(0):  # thresholds from the highest PIP down
        candidate = inclusion >= level
        if expected_false_discovery_rate(inclusion, candidate) > fdr:
            break
        selected = candidate
    return selected


def benjamini_hochberg(p_values: torch.Tensor, fdr: float = DEFAULT_FDR) -> torch.Tensor:
    """The Benjamini-Hochberg step-up rule (Benjamini and Hochberg 1995, JRSS B 57(1)): with m p-values
    sorted p_(1) ≤ … ≤ p_(m), keep the k smallest for the largest k with p_(k) ≤ k·fdr/m.

    With independent p-values, uniform under the null, the false-discovery rate is at most
    (m₀/m)·fdr, m₀ the number of nulls.

    Returns:
        Boolean mask of the rejected (selected) hypotheses.
    """
    if not 0.0 < fdr < 1.0:
        raise ValueError(f"fdr must lie in (0, 1), got {fdr}")
    p_values = p_values.double()
    count = len(p_values)
    ordered = torch.sort(p_values).values
    passing = torch.nonzero(ordered <= fdr * torch.arange(1, count + 1, dtype=torch.float64) / count).flatten()
    if len(passing) == 0:
        return torch.zeros(count, dtype=torch.bool)
    return p_values <= ordered[passing[-1]]


#: Φ⁻¹(3/4): the median absolute deviation of a normal variable is this many standard deviations.
_MAD_PER_SD = 0.6744897501960817


def empirical_null(statistic: torch.Tensor) -> tuple:
    """Centre and scale of the empirical null N(δ₀, σ₀²) of ``statistic`` (Efron 2004, "Large-scale
    simultaneous hypothesis testing: the choice of a null hypothesis", JASA 99(465)).

    Efron estimates the null from the centre of the statistics' histogram, where the null cases are
    the majority; with the few tens of inputs of a table there is no histogram to fit, so δ₀ is the
    median and σ₀ the median absolute deviation from it over Φ⁻¹(3/4), the robust normal estimates
    (Hampel 1974, JASA 69(346)). Both need more than half of the inputs to be null.
    """
    statistic = statistic.double()
    centre = statistic.median()
    return float(centre), float((statistic - centre).abs().median() / _MAD_PER_SD)


#: Samples of the studentized null statistic behind :func:`empirical_null_p_values` (≈ ±0.002 on a p-value of 0.05).
NULL_SAMPLES = 20000


def _studentized(statistic: torch.Tensor) -> torch.Tensor:
    """(s_j − δ₀)/σ₀ along the last dimension, δ₀ and σ₀ as in :func:`empirical_null`."""
    centre = statistic.median(dim=-1, keepdim=True).values
    return (statistic - centre) / ((statistic - centre).abs().median(dim=-1, keepdim=True).values / _MAD_PER_SD)


@functools.lru_cache(maxsize=8)
def _studentized_null(inputs: int, seed: int) -> torch.Tensor:
    """Sorted draws of the studentized statistic of ``inputs`` independent standard normals."""
    samples = max(1, NULL_SAMPLES // inputs)
    draws = torch.randn(samples, inputs, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return torch.sort(_studentized(draws).flatten()).values


def empirical_null_p_values(statistic: torch.Tensor, *, seed: int = 0) -> torch.Tensor:
    """One-sided p-values of every input's statistic against the empirical null of all inputs.

    t_j = (s_j − δ₀)/σ₀ (:func:`empirical_null`) is not N(0, 1) under the null: δ₀ and σ₀ are estimated
    from the same few inputs (with 20 inputs a σ₀ 25% too small is common, and Benjamini-Hochberg on
    1 − Φ(t_j) then selects something in 30% of data sets with no relevant input). Its law when all m
    inputs are independent N(δ, σ²) is the same for every δ and σ (t is location-scale invariant), so
    p_j = P(T ≥ t_j) is read from :data:`NULL_SAMPLES` draws of T (m standard normals studentized
    alike), p_j = (1 + #{T ≥ t_j})/(1 + draws): exactly valid when every input is null.
    """
    null = _studentized_null(len(statistic), seed)
    exceeding = len(null) - torch.searchsorted(null, _studentized(statistic.double()), right=False)
    return (1 + exceeding.double()) / (1 + len(null))


def select_by_empirical_null(statistic: torch.Tensor, fdr: float = DEFAULT_FDR) -> torch.Tensor:
    """Inputs whose ``statistic`` stands out of the empirical null of all inputs, at false-discovery rate ``fdr``.

    :func:`benjamini_hochberg` at ``fdr`` on :func:`empirical_null_p_values`: the empirical-Bayes
    tail-area false-discovery rate Fdr(s) = π₀·P₀(S ≥ s)/P(S ≥ s) with π₀ = 1 and the null P₀ estimated
    from the inputs themselves (Efron 2010, Large-Scale Inference, sections 4.2 and 6.2). It reads a
    statistic's position among the inputs, not its value, so it holds where the statistic is no
    calibrated probability. Each p-value is exact when every input is null, independent and normal;
    they share δ₀ and σ₀, so the bound on the rate is approximate (20 null inputs at fdr 0.1: something
    selected in about 9% of data sets, tests/analysis/test_selection.py). Relevant inputs among them
    raise δ₀ and σ₀, which makes the rule conservative as long as most inputs are null.

    Args:
        statistic: one value per input, larger for more evidence of an effect (e.g. log ψ, eq. 3.18).
        fdr: the level, in (0, 1).

    Returns:
        Boolean mask of the selected inputs (none when more than half of them share one value).
    """
    if empirical_null(statistic)[1] == 0:
        return torch.zeros(len(statistic), dtype=torch.bool)
    return benjamini_hochberg(empirical_null_p_values(statistic), fdr)


def inclusion_logit(inclusion: torch.Tensor, draws: int) -> torch.Tensor:
    """The empirical logit log((k + ½)/(n − k + ½)) of inclusion probabilities k/n estimated from n
    posterior draws (Cox 1970, The Analysis of Binary Data, section 3.2): finite at 0 and 1, where
    the plain logit is not."""
    included = inclusion.double() * draws
    return torch.log((included + 0.5) / (draws - included + 0.5))


#: Share of the restarts whose own selection must hold a group for :func:`select_by_stability` to keep it.
STABILITY_THRESHOLD = 0.75


def select_by_stability(selections, threshold: float = STABILITY_THRESHOLD) -> torch.Tensor:
    """Stability selection over restarts: keep what at least ``threshold`` of the selections keep.

    Meinshausen and Bühlmann (2010, "Stability selection", JRSS B 72(4)) keep a variable whose selection
    frequency over random half-subsamples of the rows reaches a threshold π_thr in (½, 1); here the
    randomness is the optimisation's, each restart's fit selecting on its own (the restarts share the rows,
    so their bound on the expected false discoveries, q²/((2π_thr − 1) p), is not claimed).

    Args:
        selections: ``(R, p)`` booleans, one selection per restart.
        threshold: π_thr, in (0, 1].

    Returns:
        Boolean mask of the variables selected by at least ``threshold`` of the R selections.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
    selections = torch.as_tensor(selections, dtype=torch.float64)
    return selections.mean(dim=0) >= threshold - 1e-12
