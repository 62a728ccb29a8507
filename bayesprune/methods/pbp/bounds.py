"""PAC-Bayes bounds of paper 000 (Hayou et al., probabilistic fine-tuning of pruning masks), as pure functions.

The same functions serve the PAC-Bayes training objective (:func:`pac_bayes_bound`, Theorem 1, eq. 4;
:func:`linear_bound`, eq. 13: differentiable in the risk and the KL) and the numerical certificate
computed after training on the 0-1 loss (:func:`certificate`: Theorems 1 and 2 with a Monte-Carlo
confidence interval on the empirical Gibbs risk, appendix A.3, and a union bound over the searched
hyper-parameter grid, appendix D.2).

Numbers may be tensors or Python numbers; Python numbers become float64 tensors, so every function
returns a tensor (0-dim for scalars: ``float()`` it for a plain number).
"""

import dataclasses
import math
from dataclasses import dataclass

import torch

from bayesprune.core.validation import is_int, is_number, require


def _tensor(x) -> torch.Tensor:
    return x if torch.is_tensor(x) else torch.tensor(x, dtype=torch.float64)


def kl_bernoulli(q, p) -> torch.Tensor:
    """kl(q ‖ p) = q log(q/p) + (1 − q) log((1 − q)/(1 − p)) of Bernoulli(q) to Bernoulli(p) (appendix A.2).

    Elementwise with broadcasting, differentiable in ``q`` and ``p``. Exact at the ends, with
    0 log 0 = 0: kl(0 ‖ p) = −log(1 − p), kl(1 ‖ p) = −log p, kl(q ‖ q) = 0 (also for q = 0, 1),
    and +∞ where p = 0 < q or q < 1 = p. Its derivative in q, log(q/p) − log((1 − q)/(1 − p)), is
    the KL penalty of eq. 14; it is infinite at q ∈ {0, 1}. The logs are taken as log1p of the
    relative differences, so that kl keeps its relative precision as p → q (:func:`kl_inverse`
    needs it for small c).
    """
    q, p = _tensor(q), _tensor(p)
    kl = torch.special.xlog1py(q, (q - p) / p) + torch.special.xlog1py(1 - q, (p - q) / (1 - p))
    return torch.where((q == p) & (p * (1 - p) == 0), 0.0, kl)  # q = p ∈ {0, 1} would give 0/0


def kl_inverse(q, c, *, tol: float = 1e-12) -> torch.Tensor:
    """kl⁻¹(q ‖ c) = sup{p ∈ [0, 1] : kl(q ‖ p) ≤ c} (appendix A.2), elementwise in float64.

    Bisection on [q, 1], where kl(q ‖ ·) increases, until the bracket is at most ``tol`` wide; the
    bracket's upper end is returned, so the result is never below the true value and at most ``tol``
    above it. It is exactly 1 when no p < 1 exceeds ``c`` (q = 1, or c = ∞). Not differentiable:
    the inputs are detached (a certificate, not an objective).

    Args:
        q: value(s) in [0, 1], e.g. an empirical risk.
        c: bound(s) ≥ 0 on the KL, broadcast against ``q``.
        tol: width of the final bracket, > 0.

    Raises:
        ValueError: naming ``q``, ``c`` or ``tol`` when out of range.
    """
    q, c = (_tensor(x).detach().to(torch.float64) for x in (q, c))
    require(bool(((q >= 0) & (q <= 1)).all()), "q", "lie in [0, 1]", q)
    require(bool((c >= 0).all()), "c", "be non-negative", c)
    require(is_number(tol) and tol > 0, "tol", "be positive", tol)
    q, c = torch.broadcast_tensors(q, c)
    low, high = q.clone(), torch.ones_like(q)
    for _ in range(math.ceil(math.log2(1 / tol))):
        mid = (low + high) / 2
        inside = kl_bernoulli(q, mid) <= c
        low, high = torch.where(inside, mid, low), torch.where(inside, high, mid)
    return high


def _epsilon(kl, n: int, delta: float) -> torch.Tensor:
    """ε = (KL + log(2√n/δ)) / n of eqs. 4 and 7."""
    return (_tensor(kl) + math.log(2 * math.sqrt(n) / delta)) / n


def pac_bayes_bound(risk, kl, *, n: int, delta: float) -> torch.Tensor:
    """Theorem 1, eq. 4: R̂ + min(ε + √(ε(ε + 2R̂)), √(ε/2)), ε = (KL + log(2√n/δ)) / n.

    Differentiable in ``risk`` and ``kl``: the PAC-Bayes pruning (PBP) training objective.

    Args:
        risk: empirical Gibbs risk R̂ of Q on the n examples not used by the prior, of a [0, 1]-valued
            loss (in training, a bounded surrogate of the 0-1 loss, appendix A.3).
        kl: KL(Q ‖ P).
        n: number of examples the risk is measured on, (1 − α)|S| in the paper.
        delta: confidence parameter δ ∈ (0, 1).
    """
    risk, eps = _tensor(risk), _epsilon(kl, n, delta)
    return risk + torch.minimum(eps + torch.sqrt(eps * (eps + 2 * risk)), torch.sqrt(eps / 2))


def kl_inverse_bound(risk, kl, *, n: int, delta: float) -> torch.Tensor:
    """Theorem 2, eq. 7: kl⁻¹(R̂ ‖ (KL + log(2√n/δ)) / n), arguments as in :func:`pac_bayes_bound`.

    Never above Theorem 1 with the same ε (beyond :func:`kl_inverse`'s tolerance), which relaxes it
    through kl(q ‖ p) ≥ (p − q)²/(2p) for p ≥ q and Pinsker's kl(q ‖ p) ≥ 2(p − q)². Not differentiable.
    """
    return kl_inverse(risk, _epsilon(kl, n, delta))


def sample_risk_bound(mean_risk, *, samples: int, delta: float) -> torch.Tensor:
    """Upper confidence bound kl⁻¹(R̂_m ‖ log(2/δ) / m) on the empirical Gibbs risk (appendix A.3).

    R̂_m is the mean of the empirical risks of m networks drawn i.i.d. from Q, each in [0, 1]; their
    expectation is the empirical Gibbs risk R̂(Q). This is the sample-convergence bound of Langford &
    Caruana (2001) as used by Pérez-Ortiz et al. (2021): by the Chernoff-Hoeffding inequality in
    relative-entropy form (Hoeffding 1963, Thm. 1, for i.i.d. variables in [0, 1]),
    P(R̂_m ≤ R̂(Q) − t) ≤ exp(−m kl(R̂(Q) − t ‖ R̂(Q))), so R̂(Q) ≤ kl⁻¹(R̂_m ‖ log(1/δ')/m) with
    probability ≥ 1 − δ'. The log(2/δ) of the two-sided statement is kept, as in those papers: it holds
    with probability ≥ 1 − δ/2 ≥ 1 − δ.

    Args:
        mean_risk: R̂_m, in [0, 1].
        samples: m ≥ 1.
        delta: confidence parameter δ ∈ (0, 1).
    """
    return kl_inverse(mean_risk, math.log(2 / delta) / samples)


def linear_bound(risk, kl, *, n: int, zeta: float) -> torch.Tensor:
    """The linear objective of eq. 13, R̂ + (ζ/n) KL, differentiable in ``risk`` and ``kl``.

    With κ = ζ/n its gradient flow (eq. 15) on Bernoulli inclusion probabilities has the fixed point
    of eq. 16 when the empirical risk is linear in them (uncorrelated features, appendix C.2.1).

    Args:
        risk: empirical Gibbs risk R̂ of Q.
        kl: KL(Q ‖ P).
        n: number of examples the risk is measured on.
        zeta: the trade-off ζ > 0.
    """
    return _tensor(risk) + zeta / n * _tensor(kl)


@dataclass(frozen=True)
class Certificate:
    """A numerical certificate on the 0-1 risk, from :func:`certificate`; plain floats and ints.

    Attributes:
        bound: Theorem 1 (eq. 4) at ``empirical_risk_bound``.
        bound_kl_inverse: Theorem 2 (eq. 7) at ``empirical_risk_bound``; at most ``bound`` (up to
            :func:`kl_inverse`'s tolerance).
        empirical_risk: mean empirical 0-1 risk of the sampled networks.
        empirical_risk_bound: :func:`sample_risk_bound` of it at δ/(2·``grid_size``).
        kl: KL(Q ‖ P).
        n: number of examples the risk is measured on.
        delta: overall confidence parameter δ: each bound holds with probability ≥ 1 − δ.
        samples: number of networks sampled from Q.
        grid_size: number of hyper-parameter settings searched.
    """

    bound: float
    bound_kl_inverse: float
    empirical_risk: float
    empirical_risk_bound: float
    kl: float
    n: int
    delta: float
    samples: int
    grid_size: int

    def to_dict(self) -> dict:
        """The fields, for JSON."""
        return dataclasses.asdict(self)


def certificate(*, mean_risk, samples: int, kl, n: int, delta: float = 0.05, grid_size: int = 1) -> Certificate:
    """The 0-1 risk certificate of a posterior Q, with probability ≥ 1 − δ.

    δ is split by a union bound over 2·``grid_size`` events, each given δ/(2·``grid_size``): for each
    of the ``grid_size`` hyper-parameter settings searched by their certificate (appendix D.2), the
    Monte-Carlo estimate of its empirical Gibbs risk (:func:`sample_risk_bound`, appendix A.3) and
    the PAC-Bayes theorem (eq. 4 or 7). The setting reported is chosen after both were computed, so
    both must hold for every setting at once: the Monte-Carlo bound is split over the grid as the
    theorem is. The upper bound on the empirical risk is plugged into Theorems 1 and 2: both increase
    with the empirical risk, so they remain upper bounds on the risk of Q.

    Args:
        mean_risk: mean empirical 0-1 risk of ``samples`` networks drawn i.i.d. from Q on the n
            examples not used by the prior, in [0, 1].
        samples: number of networks drawn, ≥ 1.
        kl: KL(Q ‖ P), ≥ 0.
        n: number of examples, ≥ 1.
        delta: confidence parameter δ ∈ (0, 1).
        grid_size: number of hyper-parameter settings searched, ≥ 1.

    Raises:
        ValueError: naming the argument that is out of range.
    """
    mean_risk, kl = float(mean_risk), float(kl)
    require(0 <= mean_risk <= 1, "mean_risk", "lie in [0, 1]", mean_risk)
    require(is_int(samples) and samples >= 1, "samples", "be a positive integer", samples)
    require(kl >= 0, "kl", "be non-negative", kl)
    require(is_int(n) and n >= 1, "n", "be a positive integer", n)
    require(is_number(delta) and 0 < delta < 1, "delta", "lie in (0, 1)", delta)
    require(is_int(grid_size) and grid_size >= 1, "grid_size", "be a positive integer", grid_size)
    each = delta / (2 * grid_size)
    risk_bound = float(sample_risk_bound(mean_risk, samples=samples, delta=each))
    return Certificate(
        bound=float(pac_bayes_bound(risk_bound, kl, n=n, delta=each)),
        bound_kl_inverse=float(kl_inverse_bound(risk_bound, kl, n=n, delta=each)),
        empirical_risk=mean_risk,
        empirical_risk_bound=risk_bound,
        kl=kl,
        n=n,
        delta=delta,
        samples=samples,
        grid_size=grid_size,
    )
