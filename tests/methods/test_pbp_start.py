"""PBP started from another method's mask (bayesprune.methods.pbp.start): the prior keeps exactly the mask
that method finds when fitted on S_P alone, and a start the prior cannot take is refused in one line."""

import copy

import pytest
import torch
from torch import nn

from bayesprune import fit_method
from bayesprune.core.criteria import weight_sites
from bayesprune.core.errors import ConfigError
from bayesprune.core.pruning import Budget, prune
from bayesprune.methods.pbp import split_rows
from bayesprune.pipeline.config import load_config

SPARSITY = 0.8


def _problem():
    """Three Gaussian classes in 6 dimensions, 120 training rows."""
    generator = torch.Generator().manual_seed(3)
    centres = 2.0 * torch.randn(3, 6, generator=generator)
    y = torch.arange(120) % 3
    x = centres[y] + torch.randn(120, 6, generator=generator)
    return x, y


def test_the_prior_keeps_exactly_the_start_methods_mask_fitted_on_s_p_only():
    x, y = _problem()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    start = {"predictive_samples": 2}
    fitted = fit_method(
        "pbp",
        copy.deepcopy(net),
        (x, y),
        epochs=1,
        optim={"name": "sgd", "lr": 0.01},
        options={
            "alpha": 0.5,
            "sparsity": SPARSITY,
            "start_mask": "sbnn",
            "start_options": start,
            "start_optim": {"name": "adam", "lr": 0.01},
            "prior_epochs": 5,
            "prior_mask_epochs": 0,
            "mc_samples": 5,
            "prior_samples": 2,
        },
    )
    # the oracle: the same method fitted by itself on S_P's rows only, pruned at PBP's sparsity
    prior_rows, _ = split_rows(len(x), 0.5, 0)
    alone = fit_method(
        "sbnn",
        copy.deepcopy(net),
        (x[prior_rows], y[prior_rows]),
        epochs=5,
        options=start,
        optim={"name": "adam", "lr": 0.01},
    )
    scores = alone.scores()
    expected = prune({site: scores[site] for site in weight_sites(net)}, Budget(sparsity=SPARSITY))
    for site, mask in expected.items():
        assert torch.equal(fitted.priors[site].probs > 0.5, mask), site
    kept = sum(int(mask.sum()) for mask in expected.values())
    assert kept == round((1 - SPARSITY) * sum(mask.numel() for mask in expected.values()))
    # W⁰ is the start method's point estimate (stage 2 ran no epoch, so P's means are exactly it)
    point = dict(alone.network().named_parameters())
    for site in weight_sites(net):
        torch.testing.assert_close(fitted.priors[site].loc, point[site].detach())


@pytest.mark.parametrize(
    "overrides, message",
    [
        (['pbp.start_mask="unit-gates"'], "removes whole units"),
        (['pbp.start_mask="sbnn"', "pbp.start_options={nope=1}"], "pbp.start_options.nope"),
        (['pbp.start_mask="sbnn"', "pbp.start_options={pi=2.0}"], "pbp.start_options: sbnn.pi"),
        (['pbp.start_mask="probmask"', "pbp.start_options={sparsity=0.5}"], "leave it out"),
        (['pbp.start_mask="sbnn"', "pbp.start_optim={lr=-1}"], "pbp.start_optim"),
        (["pbp.start_options={pi=0.5}"], "empty when pbp.start_mask is a criterion"),
        (['pbp.start_mask="pbp"'], "pbp.start_mask"),
    ],
)
def test_a_start_the_prior_cannot_take_is_refused_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("pbp-digits", overrides)


def test_a_start_method_without_early_stopping_refuses_validation():
    from bayesprune.methods import get_method

    options = load_config("pbp-digits", ['pbp.start_mask="probmask"']).method_options
    assert "probmask" in get_method("pbp").unsupported_for(options)["validation"]
