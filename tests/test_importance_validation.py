"""``benchmarks/importance_validation.py`` scores a selection against the truth as its definitions say
(checked against a count over every top-k set of the ranking)."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from importance_validation import scores  # noqa: E402


def brute_force_best_cut(ranking, relevant, fdr):
    best = 0.0
    for k in range(1, len(ranking) + 1):
        top = np.argsort(-ranking, kind="stable")[:k]
        if (~relevant[top]).sum() / k <= fdr:
            best = max(best, relevant[top].sum() / relevant.sum())
    return best


def test_scores_count_power_false_discoveries_and_the_best_cut():
    relevant = np.arange(20) < 5
    ranking = np.array([9.0, 8, 7, 1, 0.5] + [6.0] + [0.1] * 14)  # one null input ranked 4th, two relevant low
    selected = ranking > 0.9
    result = scores(selected, ranking, relevant, 0.1)
    assert result["power"] == 0.8 and result["fdp"] == 0.2 and result["top5"] == 4
    # top 3: 3 of 5 found, FDP 0; top 5 (4 relevant, 1 null): FDP 0.2 > 0.1; top 6: all 5 found, FDP 1/6
    assert result["best_cut"] == 0.6
    assert scores(selected, ranking, relevant, 0.2)["best_cut"] == 1.0
    generator = np.random.default_rng(0)
    for _ in range(200):
        ranking = generator.normal(size=20) + 2 * relevant * generator.random()
        for fdr in (0.1, 0.25):
            found = scores(ranking > 0, ranking, relevant, fdr)["best_cut"]
            assert found == brute_force_best_cut(ranking, relevant, fdr)
