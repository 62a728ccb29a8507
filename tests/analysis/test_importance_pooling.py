"""Importance of several restarts pooled (issue 38): the mixture's ψ, its interval, R-hat across restarts
and the selection by the Bayesian false-discovery rate, each against an independent computation."""

import itertools

import numpy as np
import pytest
import torch

from bayesprune.analysis.importance import (
    disagreeing_features,
    feature_importance,
    pooled_importance,
    weight_inclusion_matrices,
)
from bayesprune.analysis.selection import expected_false_discovery_rate, select_by_bayesian_fdr
from bayesprune.models.architectures import mlp


def restarts(num_restarts=3, draws=200, seed=0):
    """ψ(Z) draws and ψ(p) of ``num_restarts`` random posteriors of one small MLP, computed directly."""
    net = mlp((4,), 1, hidden=(3,))
    generator = torch.Generator().manual_seed(seed)
    at_p, sampled = [], []
    for _ in range(num_restarts):
        probs = {
            name: torch.rand(p.shape, generator=generator, dtype=torch.float64) for name, p in net.named_parameters()
        }
        at_p.append(feature_importance(weight_inclusion_matrices(probs, net)))
        sampled.append(
            torch.stack(
                [
                    feature_importance(
                        weight_inclusion_matrices(
                            {k: torch.bernoulli(v, generator=generator) for k, v in probs.items()}, net
                        )
                    )
                    for _ in range(draws)
                ]
            )
        )
    return torch.stack(sampled).numpy(), torch.stack(at_p).numpy()


def test_pooled_psi_is_the_mean_of_the_restarts_and_its_interval_holds_each_of_them():
    draws, at_p = restarts()
    rows = pooled_importance(draws, at_p, ["a", "b", "c", "d"])
    np.testing.assert_allclose([row["psi"] for row in rows], at_p.mean(axis=0))  # by hand: the mean over restarts
    for j, row in enumerate(rows):
        assert row["psi_low"] <= at_p[:, j].min() and at_p[:, j].max() <= row["psi_high"]
        assert row["restart_low"] == pytest.approx(at_p[:, j].min()) and row["restart_high"] == pytest.approx(
            at_p[:, j].max()
        )
        assert row["psi_low"] <= np.quantile(draws[:, :, j], 0.03) + 1e-12  # at least the pooled draws' 94% interval
        assert row["psi_high"] >= np.quantile(draws[:, :, j], 0.97) - 1e-12
    # the mixture's mean is also what the pooled draws of ψ(Z) estimate (ψ(Z) is unbiased for ψ(p))
    np.testing.assert_allclose([row["psi"] for row in rows], draws.reshape(-1, 4).mean(axis=0), atol=0.03)
    assert sorted(row["rank"] for row in rows) == [1, 2, 3, 4]
    assert rows[int(np.argmax(at_p.mean(axis=0)))]["rank"] == 1


def gelman_rubin(chains: np.ndarray) -> float:
    """Split R-hat (Gelman et al., BDA3, section 11.4) of (C, S) draws, written out: each chain cut in two
    halves, then the variance of the pooled draws against the mean variance within the halves."""
    half = chains.shape[1] // 2
    chains = np.concatenate([chains[:, :half], chains[:, half : 2 * half]])
    _, draws = chains.shape
    within = chains.var(axis=1, ddof=1).mean()
    between = draws * chains.mean(axis=1).var(ddof=1)
    return float(np.sqrt(((draws - 1) / draws * within + between / draws) / within))


def test_r_hat_across_restarts_matches_the_classic_formula_and_flags_restarts_that_disagree():
    rng = np.random.default_rng(0)
    agree = rng.normal(0.5, 0.05, size=(4, 2000, 1))
    apart = agree + np.array([0.0, 0.0, 0.0, 0.06]).reshape(4, 1, 1)  # one restart found another optimum
    draws = np.concatenate([agree, apart], axis=2)
    rows = pooled_importance(draws, draws.mean(axis=1), ["agree", "apart"])
    # on normal draws the rank-normalised split R-hat (Vehtari et al. 2021) is the plain split R-hat
    assert rows[0]["r_hat"] == pytest.approx(gelman_rubin(agree[:, :, 0]), abs=0.01) and rows[0]["r_hat"] < 1.01
    assert rows[1]["r_hat"] == pytest.approx(gelman_rubin(apart[:, :, 0]), abs=0.01) and rows[1]["r_hat"] > 1.05
    assert rows[0]["ess"] > 4000  # independent draws: the bulk ESS is about the number of draws (8000)
    assert disagreeing_features(rows) == ["apart"]


def test_one_restart_has_no_r_hat():
    draws, at_p = restarts(num_restarts=1)
    rows = pooled_importance(draws, at_p)
    assert all(np.isnan(row["r_hat"]) and np.isnan(row["ess"]) for row in rows)
    assert disagreeing_features(rows) == []


def test_inclusion_probability_is_the_share_of_draws_connecting_the_input():
    draws = np.zeros((2, 4, 3))
    draws[:, :, 0] = 0.5  # always connected
    draws[0, :1, 1] = 0.25  # connected in 1 of 8 pooled draws
    rows = pooled_importance(draws, draws.mean(axis=1))
    assert [row["inclusion_probability"] for row in rows] == [1.0, 1 / 8, 0.0]
    assert [row["selected"] for row in rows] == [True, False, False]


def brute_force_selection_size(inclusion, fdr):
    """The largest number of inputs any subset can hold with posterior expected FDR ≤ fdr, by enumeration."""
    best = 0
    for size in range(1, len(inclusion) + 1):
        for subset in itertools.combinations(range(len(inclusion)), size):
            if np.mean([1 - inclusion[j] for j in subset]) <= fdr + 1e-12:
                best = max(best, size)
    return best


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("fdr", [0.05, 0.1, 0.3])
def test_bayesian_fdr_selection_is_the_largest_set_within_the_bound(seed, fdr):
    inclusion = torch.rand(8, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) ** 0.3
    selected = select_by_bayesian_fdr(inclusion, fdr)
    assert int(selected.sum()) == brute_force_selection_size(inclusion.tolist(), fdr)
    assert expected_false_discovery_rate(inclusion, selected) <= fdr
    if selected.any() and not selected.all():  # the highest inclusion probabilities are the ones kept
        assert inclusion[selected].min() > inclusion[~selected].max()


def test_tied_inclusion_probabilities_are_kept_or_dropped_together():
    inclusion = torch.tensor([1.0, 0.875, 0.875, 0.25], dtype=torch.float64)
    assert select_by_bayesian_fdr(inclusion, 0.1).tolist() == [True, True, True, False]  # mean(0, 1/8, 1/8) = 1/12
    assert select_by_bayesian_fdr(inclusion, 0.05).tolist() == [True, False, False, False]
    with pytest.raises(ValueError, match="fdr"):
        select_by_bayesian_fdr(inclusion, 1.0)


@pytest.mark.parametrize(
    ("settings", "input_shape", "expected"),
    [
        (["data.dataset='csv'"], (30,), 4),  # the sBNN on the user's table: restarts pooled by default
        (["data.dataset='npz'"], (30,), 4),
        (["data.dataset='npz'"], (1, 8, 8), 1),  # images: one fit (the importance of pixels is not pooled by default)
        (["data.dataset='digits'"], (64,), 1),  # a packaged dataset keeps its one fit
        (["data.dataset='csv'", "method='sparse-vd'"], (30,), 1),  # a method without restarts to pool
        (["data.dataset='csv'", "chains=2"], (30,), 2),  # asked for, taken as it is
    ],
)
def test_auto_chains_pool_four_sbnn_restarts_on_a_table(settings, input_shape, expected):
    from types import SimpleNamespace

    from bayesprune.pipeline.config import load_config
    from bayesprune.pipeline.runner import run_chains

    config = load_config(
        "sparse-vd-digits" if "method='sparse-vd'" in settings else "default",
        [s for s in settings if not s.startswith("method")],
    )
    assert config.chains == ("auto" if not any(s.startswith("chains") for s in settings) else 2)
    assert run_chains(config, SimpleNamespace(input_shape=input_shape)) == expected


def test_importance_refuses_logits_in_place_of_probabilities():
    """docs/usage.md passed fitted.scores() (inclusion logits) and got ψ = 711,165,510 for a feature."""
    from bayesprune.analysis.importance import importance_table

    net = mlp((3,), 1, hidden=(2,))
    logits = {name: torch.full(p.shape, 12.0) for name, p in net.named_parameters()}
    with pytest.raises(ValueError, match=r"\[0, 1\].*inclusion_probabilities"):
        importance_table(net, logits)
    probs = {name: torch.sigmoid(value) for name, value in logits.items()}
    assert all(0 <= row["psi"] <= 1 for row in importance_table(net, probs))


def test_the_docs_call_importance_table_with_probabilities():
    from pathlib import Path

    usage = (Path(__file__).parents[2] / "docs" / "usage.md").read_text()
    assert "importance_table(fitted.net, fitted.inclusion_probabilities()" in usage
    assert "importance_table(fitted.net, fitted.scores()" not in usage


def test_each_restarts_rank_range_and_the_tiers_they_all_agree_on():
    """The best and worst rank of a feature are those of scipy's ranking of each restart's ψ(p_c) alone;
    ``agreed_tiers`` cuts the pooled order after k wherever every restart's first k features are the same set
    (brute force over k and the restarts)."""
    from scipy.stats import rankdata

    from bayesprune.analysis.importance import agreed_tiers

    def brute_force_cuts(at_p, rows):
        pooled = [row["feature"] for row in sorted(rows, key=lambda row: row["rank"])]
        names = [row["feature"] for row in rows]
        firsts = [[names[j] for j in np.argsort(-psi, kind="stable")] for psi in at_p]
        return [k for k in range(1, len(names) + 1) if all(set(first[:k]) == set(pooled[:k]) for first in firsts)]

    for seed in range(6):
        draws, at_p = restarts(num_restarts=4, draws=20, seed=seed)
        rows = pooled_importance(draws, at_p, ["a", "b", "c", "d"])
        by_restart = np.array([rankdata(-psi, method="ordinal") for psi in at_p])
        assert [row["restart_rank_best"] for row in rows] == list(by_restart.min(axis=0))
        assert [row["restart_rank_worst"] for row in rows] == list(by_restart.max(axis=0))
        cuts = np.cumsum([len(tier) for tier in agreed_tiers(rows)]).tolist()
        assert cuts == brute_force_cuts(at_p, rows)
    # constructed: every restart puts d, then b first; a and c swap between restarts
    at_p = np.array([[0.2, 0.5, 0.1, 0.9], [0.1, 0.6, 0.3, 0.8], [0.3, 0.4, 0.2, 0.7]])
    rows = pooled_importance(np.repeat(at_p[:, None], 5, axis=1), at_p, list("abcd"))
    assert agreed_tiers(rows) == [["d"], ["b"], ["a", "c"]]
    one = pooled_importance(np.repeat(at_p[:1, None], 5, axis=1), at_p[:1], list("abcd"))
    assert agreed_tiers(one) == [["d"], ["b"], ["a"], ["c"]]
    disagree = np.array([[0.9, 0.1, 0.2, 0.3], [0.1, 0.9, 0.2, 0.3]])
    rows = pooled_importance(np.repeat(disagree[:, None], 5, axis=1), disagree, list("abcd"))
    assert agreed_tiers(rows) == [["a", "b", "d", "c"]]
