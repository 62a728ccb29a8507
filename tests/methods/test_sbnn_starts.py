"""``sbnn.starts`` and ``sbnn.keep``: several starts of one sBNN fit, one kept by a rule that reads no test data."""

import pyro
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO
from torch import nn

from bayesprune.core.errors import ConfigError
from bayesprune.core.optim import OptimConfig
from bayesprune.data import Dataset
from bayesprune.methods import FitContext, get_method
from bayesprune.methods.sbnn import SBNNOptions, fit_starts, keep_start

# The middle start is the usual one; x20 and x50 begin far out in the slab and 15 epochs do not bring
# them back (ELBO about -2,900 and -21,000 against -310), so a rule that keeps the first or the last
# start, or the lowest ELBO, keeps the wrong one.
STARTS = (20.0, 1.0, 50.0)


class SealedTestSplit:
    """A dataset whose test split must not be read: any read of it fails the test."""

    def __init__(self, data):
        self._data = data

    def __getattr__(self, name):
        assert name not in ("x_test", "y_test"), f"the start was chosen by reading {name}"
        return getattr(self._data, name)


def toy_regression(seed=0, n=96):
    """y = sin(2 x1) − x2 + 0.1 noise on 3 inputs (x3 irrelevant), test rows a separate draw."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(2 * n, 3, generator=generator)
    y = torch.sin(2 * x[:, 0]) - x[:, 1] + 0.1 * torch.randn(2 * n, generator=generator)
    return Dataset("toy", "regression", x[:n], y[:n], x[n:], y[n:], (3,), None)


def held_out_rows():
    x = torch.randn(32, 3, generator=torch.Generator().manual_seed(9))
    return x, torch.sin(2 * x[:, 0]) - x[:, 1]


def context(epochs=15):
    return FitContext(
        seed=0, epochs=epochs, batch_size=32, optim=OptimConfig(lr=0.01), task="regression", validation=held_out_rows()
    )


def network():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))


@pytest.fixture(scope="module")
def fits():
    """One fit per start of :data:`STARTS` on the toy data."""
    return fit_starts(network(), SealedTestSplit(toy_regression()), SBNNOptions(starts=STARTS), context())


def independent_elbo(fitted, data) -> float:
    """The ELBO by Pyro's own mean-field estimator (the registered KL of each weight's q against the
    prior, 20 draws of W for the likelihood), not by the package's objective."""
    pyro.clear_param_store()  # modules of the same parameter names read this fit's own values
    pyro.set_rng_seed(123)
    try:
        return -TraceMeanField_ELBO(num_particles=20).loss(fitted.model, fitted.guide, data.x_train, data.y_train)
    finally:
        pyro.clear_param_store()


def test_keep_elbo_keeps_the_start_of_highest_elbo_without_reading_the_test_split(fits):
    sealed = SealedTestSplit(toy_regression())
    kept = keep_start(fits, sealed, SBNNOptions(starts=STARTS, keep="elbo"), context())
    scores = [independent_elbo(fitted, toy_regression()) for fitted in fits]
    best = scores.index(max(scores))
    assert kept.guide is fits[best].guide and best == STARTS.index(1.0), (scores, kept.starts)
    assert [record["kept"] for record in kept.starts] == [index == best for index in range(len(STARTS))]
    # The ELBO recorded for every start agrees with the independent estimate.
    for record, factor, score in zip(kept.starts, STARTS, scores):
        assert record["start"] == factor and record["elbo"] == pytest.approx(score, rel=0.01), (scores, kept.starts)


def test_keep_validation_keeps_the_lowest_error_on_the_held_out_training_rows(fits):
    sealed = SealedTestSplit(toy_regression())
    kept = keep_start(fits, sealed, SBNNOptions(starts=STARTS, keep="validation"), context())
    x, y = held_out_rows()
    with torch.no_grad():
        errors = [(fitted.network()(x).squeeze(-1) - y).pow(2).mean().sqrt().item() for fitted in fits]
    best = errors.index(min(errors))
    assert kept.guide is fits[best].guide, (errors, kept.starts)
    assert [record["validation"] for record in kept.starts] == pytest.approx(errors, rel=1e-4)


def test_the_method_fits_every_start_and_reports_the_kept_ones_epoch():
    ctx = context(epochs=4)
    fitted = get_method("sbnn").fit(network(), SealedTestSplit(toy_regression()), SBNNOptions(starts=(20.0, 1.0)), ctx)
    assert [record["start"] for record in fitted.starts] == [20.0, 1.0]
    assert fitted.starts[1]["kept"] and fitted.metrics()["starts"] == fitted.starts
    assert ctx.best_epoch == fitted.best_epoch and ctx.training_cost()["train_epochs"] == 8


@pytest.mark.parametrize(
    "values, field",
    [
        ({"starts": []}, "sbnn.starts"),
        ({"starts": [1.0, 1.0]}, "sbnn.starts"),
        ({"starts": [0.0]}, "sbnn.starts"),
        ({"keep": "test"}, "sbnn.keep"),
    ],
)
def test_bad_starts_or_keep_are_refused_by_name(values, field):
    with pytest.raises(ConfigError, match=f"^{field} must"):
        SBNNOptions(**values)
