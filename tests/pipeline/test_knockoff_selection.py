"""``bayesprune importance --selection knockoff`` (issue 38, item 2): the method is refit on the inputs
beside their knockoff copies and W_j = ψ_j − ψ̃_j; the fit is replaced here by a stand-in whose ψ is
each column's absolute correlation with the target, so the wiring is checked without training."""

import numpy as np
import pytest
import torch

import bayesprune.pipeline.importance as importance_module
from bayesprune.analysis.knockoffs import knockoff_threshold
from bayesprune.core.errors import BayesPruneError
from bayesprune.data import REGRESSION, Dataset
from bayesprune.pipeline.config import RunConfig, apply_overrides


class CorrelationMethod:
    """Records every dataset it is fitted on; its "fit" is the columns' absolute correlation with y."""

    def __init__(self):
        self.fits = []

    def fit(self, net, data, options, ctx):
        self.fits.append((data, ctx.seed))
        x, y = data.x_train.double().numpy(), data.y_train.double().numpy()
        return np.abs([np.corrcoef(column, y)[0, 1] for column in x.T])


@pytest.fixture
def method(monkeypatch):
    stand_in = CorrelationMethod()
    monkeypatch.setattr(importance_module, "get_method", lambda name: stand_in)
    monkeypatch.setattr(importance_module, "input_importance", lambda psi: [{"psi": value} for value in psi])
    return stand_in


def table(rows=4000, features=6, seed=0):
    """x ~ N(0, AR(1) 0.5), y depends on x0 and x3 only."""
    rng = np.random.default_rng(seed)
    sigma = 0.5 ** np.abs(np.subtract.outer(np.arange(features), np.arange(features)))
    x = rng.multivariate_normal(np.zeros(features), sigma, size=rows)
    y = 2 * x[:, 0] + 2 * x[:, 3] + rng.standard_normal(rows)
    as_tensor = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    return (
        Dataset(
            name="knockoff-test",
            task=REGRESSION,
            x_train=as_tensor(x[:3000]),
            y_train=as_tensor(y[:3000]),
            x_test=as_tensor(x[3000:]),
            y_test=as_tensor(y[3000:]),
            input_shape=(features,),
            num_classes=None,
        ),
        sigma,
    )


def test_statistic_is_the_fits_importance_of_each_input_minus_its_knockoffs(method):
    dataset, sigma = table()
    config = RunConfig.from_dict(apply_overrides({}, ["method='sbnn'", "chains=2", "seed=7", "device='cpu'"]))
    w = importance_module.knockoff_statistic(config, dataset)
    assert [seed for _, seed in method.fits] == [7, 8]  # one fit per restart of the run, the run's seeds
    augmented = method.fits[0][0]
    assert augmented.input_shape == (12,) and augmented.x_test.shape == (1000, 12)
    torch.testing.assert_close(augmented.x_train[:, :6], dataset.x_train)
    # (X, X̃) has the knockoffs' joint covariance [[Σ, Σ − D], [Σ − D, Σ]] with s = min(1, 2 λ_min(Σ)) (Σ = R here)
    s = min(1.0, 2 * np.linalg.eigvalsh(sigma).min())
    cross = np.cov(augmented.x_train.double().numpy().T)[:6, 6:]
    np.testing.assert_allclose(cross, sigma - s * np.eye(6), atol=0.08)
    # ψ of the stand-in is |corr(column, y)|: the knockoffs of relevant inputs carry only what Σ − D passes on
    x, y = augmented.x_train.double().numpy(), augmented.y_train.double().numpy()
    correlation = np.abs([np.corrcoef(column, y)[0, 1] for column in x.T])
    np.testing.assert_allclose(w, correlation[:6] - correlation[6:], rtol=1e-6)
    assert w[0] > 0.3 and w[3] > 0.3 and np.abs(np.delete(w, [0, 3])).max() < w[[0, 3]].min()


def test_record_selects_the_inputs_at_or_above_the_knockoff_plus_threshold():
    rows = [{"feature": name} for name in "abcdefg"]
    w = np.array([5, 4, 3, -2, 1, -0.5, 0])
    record = importance_module.knockoff_record(rows, w, fdr=0.34, restarts=4)
    assert knockoff_threshold(w, 0.34) == 3 == record["threshold"]  # (1 + 0) / 3 ≤ 0.34; t = 1 gives (1 + 1) / 4
    assert record["selected"] == ["a", "b", "c"] and record["not_selected"] == ["d", "e", "f", "g"]
    assert record["rule"] == "knockoff+" and record["knockoff_statistic"]["d"] == -2
    nothing = importance_module.knockoff_record(rows, w, fdr=0.3, restarts=4)  # needs 1/0.3 > 3 selections
    assert nothing["selected"] == [] and nothing["threshold"] is None


@pytest.mark.parametrize(
    "options, message",
    [
        ({"selection": "lasso"}, "--selection must be one of bayesian-fdr, knockoff"),
        ({"selection": "knockoff", "fdr": 0.0}, "--fdr must lie in \\(0, 1\\)"),
    ],
)
def test_a_bad_selection_is_refused_in_one_line_before_anything_is_read(tmp_path, options, message):
    with pytest.raises(BayesPruneError, match=message):
        importance_module.importance(tmp_path / "no-run", **options)


def test_the_report_names_the_knockoff_selection(tmp_path):
    import json

    from bayesprune.pipeline.report import _importance_files

    rows = [{"feature": name} for name in "abcdefg"]
    record = importance_module.knockoff_record(rows, np.array([5, 4, 3, -2, 1, -0.5, 0]), fdr=0.34, restarts=4)
    (tmp_path / "selection.json").write_text(json.dumps(record))
    lines = _importance_files(tmp_path)
    assert any(
        line.startswith("**Selected inputs (3 of 7):** a, b, c; removed: d, e, f, g. model-X knockoffs")
        for line in lines
    )
