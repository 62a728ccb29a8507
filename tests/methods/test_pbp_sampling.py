"""PBP's ``sampling = "examples"``: the m = draws · n values it hands the certificate's Monte-Carlo step
(:func:`bayesprune.methods.pbp.bounds.sample_risk_bound`) must be independent, a fresh network for every example
at every draw. A network reused for an example across draws repeats its value, so the kl form of
Hoeffding's inequality with m = draws · n no longer holds: for two draws its failure probability grows
from δ'/2 to about √(δ'/2). The oracles are a classifier whose every network is right with a known
probability (0.7 wrong, independently per draw) and the Hoeffding guarantee itself, checked by Monte Carlo."""

import torch

from bayesprune.methods import pbp
from bayesprune.methods.pbp.bounds import sample_risk_bound
from helpers import OneWeightDecides

WRONG = 0.7  # the Gibbs risk of the classifier below


def per_example_errors(n: int, draws: int) -> torch.Tensor:
    toy = OneWeightDecides()
    return pbp.gibbs_errors(
        toy, toy, torch.ones(n, 1), torch.zeros(n, dtype=torch.long), samples=draws, sampling="examples"
    )


def test_two_draws_on_one_example_agree_as_often_as_independent_networks_do():
    """Independent draws agree with probability 0.7² + 0.3² = 0.58; a reused network always agrees. The
    values come draw by draw (value i and n + i are example i's); any other pairing of two values also
    compares independent draws, so the test cannot fail on correct code whatever the order."""
    torch.manual_seed(0)
    n = 4000
    errors = per_example_errors(n, draws=2)
    assert errors.shape == (2 * n,)
    first, second = errors[:n], errors[n:]
    agree = float((first == second).double().mean())
    assert abs(agree - 0.58) < 4 * (0.58 * 0.42 / n) ** 0.5


def test_the_monte_carlo_step_fails_at_most_as_often_as_its_confidence_allows():
    """Hoeffding (kl form) on m i.i.d. values in [0, 1]: P(kl⁻¹(R̂_m ‖ log(2/δ)/m) < R) ≤ δ/2. With n = 10
    examples, 4 draws and δ = 0.2, independent draws fail about 1.5% of the time; networks reused across
    draws about 14.5%, above δ/2 = 10%."""
    torch.manual_seed(1)
    n, draws, delta, repeats = 10, 4, 0.2, 400
    means = torch.stack([per_example_errors(n, draws).mean() for _ in range(repeats)])
    values, counts = means.unique(return_counts=True)  # R̂_m takes at most m + 1 values: one bound each
    fails = torch.stack([sample_risk_bound(value, samples=n * draws, delta=delta) < WRONG for value in values])
    rate = float(counts[fails].sum()) / repeats
    assert rate <= delta / 2 - 3 * (0.1 * 0.9 / repeats) ** 0.5  # below 10% by 3 standard errors (5.5%)
